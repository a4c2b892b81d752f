"""``BookBase``: what both Redis books are built from: a ``Namespace`` (S >= 1 shards),
the client, the driver that runs the namespace's plans on that client (``_book_driver``),
and the surface (``_surface``), one table of ``Method`` for both facades."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, ClassVar, Self, Unpack

from . import _operations as operations
from . import _surface as surface
from ._book_driver import AsyncDriver, Driver
from ._connection import DEFAULT_REDIS_URL, book_client
from ._keys import KeySchema
from ._merged import FIX_COUNT, MergedPlan, every
from ._namespace import DEFAULT_RETENTION, BookOptions, Namespace
from ._plan import BookScript
from ._scripts import in_library, with_helpers
from ._shard import Shard
from ._shards import HomeRule, prefix_home
from ._surface import Method

__all__ = ["DEFAULT_RETENTION", "BookBase"]


class BookBase:
    """A book's namespace, client and driver, and its settings."""

    asyncio: ClassVar[bool] = False
    """True for a book on a ``redis.asyncio`` client."""

    def __init__(self, client: Any, **options: Unpack[BookOptions]) -> None:
        self.options = options
        """The keywords the book was made with (its twin's, ``AsyncRedisBook.twin_of``)."""
        self.ns = Namespace(**options)
        """The namespace: its shards, which shard holds what, its settings."""
        self.client = client
        self.namespace = self.ns.name
        self.retention_versions = self.ns.first.retention_versions
        self.retention = self.ns.retention
        self.shards = self.ns.count
        self.driver = (AsyncDriver if self.asyncio else Driver)(client, self.ns)
        self.engine = self.driver.engines[0]
        """Shard 0's engine (the one shard's, when S = 1)."""
        self.layout = self.ns.first
        self.keys: KeySchema = self.layout.keys
        """Shard 0's key schema (the namespace's, when S = 1)."""
        self.shard_check = self.ns.count_check
        self.map = self.ns.map
        self.change_channels = [shard.keys.changes_channel for shard in self.ns.shards]

    # -- the surface (``_surface``: one table for both facades) --------------------

    create = Method(surface.create)
    create_many = Method(surface.create_many)
    get = Method(surface.get)
    apply = Method(surface.apply)
    cancel = Method(surface.cancel)
    cancel_many = Method(surface.cancel_many)
    claim_run = Method(surface.claim_run)
    audit = Method(surface.audit)
    record_audit = Method(surface.record_audit)
    expire = Method(surface.expire)
    apply_many = Method(surface.apply_many)
    apply_many_then = Method(surface.apply_many_then)
    apply_in_script = Method(surface.apply_in_script)
    expire_many = Method(surface.expire_many)
    resume = Method(surface.resume)
    deliver_result = Method(surface.deliver_result)
    drain_notifications = Method(surface.drain_notifications)
    consume_notifications = Method(surface.consume_notifications)
    ack = Method(surface.ack)
    drain_group_notifications = Method(surface.drain_group_notifications)
    consume_group_notifications = Method(surface.consume_group_notifications)
    ack_group_notifications = Method(surface.ack_group_notifications)
    overdue = Method(surface.overdue)
    overdue_count = Method(surface.overdue_count)
    record_sweep = Method(surface.record_sweep)
    last_sweep_ms = Method(surface.last_sweep_ms)
    claim_sweep = Method(surface.claim_sweep)
    list_tasks = Method(surface.list_tasks)
    heartbeat = Method(surface.heartbeat)
    end_stalled = Method(surface.end_stalled)
    last_cursor = Method(surface.last_cursor)
    seal_group = Method(surface.seal_group)
    group = Method(surface.group)
    group_members = Method(surface.group_members)
    now_ms = Method(surface.now_ms)
    info = Method(surface.info)
    children = Method(surface.children)
    search = Method(surface.search)
    workers = Method(surface.workers)
    announce_worker = Method(surface.announce_worker)
    retire_worker = Method(surface.retire_worker)
    worker_records = Method(surface.worker_records)
    stats = Method(surface.stats)
    task_names = Method(surface.task_names)
    name_totals = Method(surface.name_totals)
    gauges = Method(surface.gauges)
    count_by_state = Method(surface.count_by_state)
    transition_counts = Method(surface.transition_counts)
    prune = Method(surface.prune)
    catch_up_index = Method(surface.catch_up_index)
    append_output = Method(surface.append_output)
    output = Method(surface.output)
    take_slot = Method(surface.take_slot)
    release_slot = Method(surface.release_slot)
    stored_traces = Method(surface.stored_traces)
    claim_run_in_slot = Method(surface.claim_run_in_slot)
    wait_output = Method(surface.wait_output)

    def shard_of(self, task_id: Any) -> Shard:
        """The shard holding ``task_id``: its key schema (``.keys``) and retention."""
        return self.ns.shard_of(task_id)

    def extra_script(self, source: str) -> BookScript:
        """A script of the caller's, registered on the book's client, for
        ``apply_many_then`` (no round trip until first use)."""
        return self.engine.register(source)

    def events_script(self, source: str) -> BookScript:
        """A script of the caller's for ``apply_in_script``: ``source`` runs with the task
        helpers and ``apply_event`` (apply.lua's body) in front of it (a library of its
        own, called by FCALL where the book's is)."""
        return in_library(self.extra_script(with_helpers(source)), "events", source)

    def _server_check(self, reading: bool) -> MergedPlan[str | None]:
        """``check_server``'s plan: a sharded book about to write fixes the namespace's
        shard count first; the shards' first eviction policy (None when INFO is refused)."""
        if self.shards > 1 and not reading:
            yield FIX_COUNT
        found: list[str | None] = yield every(self.ns.shards, operations.check_server, writes=True)
        policies = sorted({policy for policy in found if policy is not None})
        return policies[0] if policies else None

    @classmethod
    def from_url(
        cls,
        url: str = DEFAULT_REDIS_URL,
        *,
        namespace: str = "asyncbook",
        retention_versions: int = 8,
        retention: timedelta | None = DEFAULT_RETENTION,
        wait_replicas: int = 0,
        wait_timeout_ms: int = 1000,
        shards: int = 1,
        home_of: HomeRule = prefix_home,
        **connection: Any,
    ) -> Self:
        """A book on the Redis at ``url`` (redis://, rediss://, unix://, redis+cluster://,
        redis+sentinel://); no connection is made until the first call.

        ``wait_replicas`` > 0: each write waits (``WAIT``, in the write's round trip) for
        that many replicas, up to ``wait_timeout_ms``, else raises ``NotReplicatedError``
        (docs/redis.md, "Waiting for a replica", says which writes).

        ``shards`` > 1 splits the namespace over that many hash tags, so it spreads over
        a Cluster's masters; the count is fixed at the namespace's first use
        (docs/redis.md, "Sharded namespaces"); ``home_of`` says which shard claims a
        callback id (the same in every writer).

        ``connection`` overrides the client's options: redis-py's connection settings
        (``socket_timeout``, ``retry``...). Any other keyword raises ``TypeError`` naming
        it (redis-py would fail at the first connection, or drop it unseen on a Cluster).
        """
        where = f"{cls.__name__}.from_url()"
        return cls(
            book_client(url, connection, asyncio=cls.asyncio, where=where),
            namespace=namespace,
            retention_versions=retention_versions,
            retention=retention,
            wait_replicas=wait_replicas,
            wait_timeout_ms=wait_timeout_ms,
            shards=shards,
            home_of=home_of,
        )
