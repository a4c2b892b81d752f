"""The Redis key schema, in one place.

Every key of a namespace carries the hash tag ``{namespace}``, so all of a book's keys
live in one Redis Cluster slot: every script touches one slot, and callback ids and
idempotency keys stay global and exact on a single Redis and on a Cluster alike.
A sharded namespace (``_shards``) has one such schema per shard, each on its own hash
tag ``{namespace{k.n}`` (a namespace holds no brace, so no shard's tag is any other
namespace's or shard's). Ids follow a fixed per-kind prefix and are escaped (``%``,
``{``, ``}``), so different ids never share a key and no id can move a key into another
slot.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Any, overload

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from .._models import STATE_NAMES
from ..errors import invalid

__all__ = ["SORT_INDEXED", "KeySchema", "escape_id", "shard_tag"]

SORT_INDEXED = ("started", "ended", "runtime", "attempts")
"""The fields a sort index is kept for (lua/_info.lua's SORT_SLOT order)."""


_SPECIAL = frozenset("%{}")


def escape_id(value: str) -> str:
    """Injective, brace-free spelling of an id for use inside a key."""
    if _SPECIAL.isdisjoint(value):
        return value
    return value.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")


@lru_cache(maxsize=4096)
def shard_tag(namespace: str, index: int, total: int) -> str:
    """The hash tag of shard ``index`` of ``total``: ``{namespace{index.n}`` with the
    smallest n whose Cluster slot lies in the index-th of ``total`` equal slot ranges, so
    the shards spread evenly over the masters of a cluster whose slots are split evenly
    (as ``redis-cli --cluster create`` splits them). Stable: a function of its arguments."""
    low = index * REDIS_CLUSTER_HASH_SLOTS // total
    high = (index + 1) * REDIS_CLUSTER_HASH_SLOTS // total
    tags = (f"{{{namespace}{{{index}.{n}}}" for n in itertools.count())
    return next(tag for tag in tags if low <= key_slot(tag.encode()) < high)


class _Tagged(property):
    """A key (or channel) of the schema's hash tag: ``<tag>:<suffix>``; a ``property``,
    as the schema's other keys of no id are."""

    def __init__(self, suffix: str) -> None:
        super().__init__(lambda keys: f"{keys.tag}:{suffix}")

    if TYPE_CHECKING:  # a ``str`` to the type checker, as a ``@property`` would be

        @overload
        def __get__(self, keys: None, owner: type, /) -> _Tagged: ...
        @overload
        def __get__(self, keys: Any, owner: type | None = None, /) -> str: ...
        def __get__(self, keys: Any, owner: type | None = None, /) -> Any: ...


def _per_id(kind: str) -> Callable[[KeySchema, str], str]:
    """A method naming the key of one id (escaped) of a kind: ``<tag>:<kind>:<id>``."""

    def key(keys: KeySchema, identifier: str) -> str:
        return f"{keys.tag}:{kind}:{escape_id(identifier)}"

    return key


@dataclass(frozen=True)
class KeySchema:
    """Names of every key and channel a book uses under one namespace."""

    namespace: str
    shard_index: int = 0
    """Which shard of the namespace these keys are (0 when it has one)."""
    shard_total: int = 1
    """How many shards the namespace has; 1 is the one-slot layout, tag ``{namespace}``."""

    def __post_init__(self) -> None:
        ns = self.namespace
        if not isinstance(ns, str) or not ns or any(c in ns for c in "{}") or ns.isspace():
            raise invalid("namespace must be a non-empty string without braces", field="namespace")

    @cached_property
    def tag(self) -> str:
        """The hash tag shared by every key of the namespace (of the shard), worked out once."""
        if self.shard_total == 1:
            return "{" + self.namespace + "}"
        return shard_tag(self.namespace, self.shard_index, self.shard_total)

    @property
    def shard_count(self) -> str:
        """String: how many shards the namespace has, fixed at its first use (absent: 1);
        always on the namespace's own tag."""
        return "{" + self.namespace + "}:shards"

    def session(self, digest: str) -> str:
        """String: a status server's signed-in session (the SHA-256 of its id), alive
        until sign-out or its expiry; always on the namespace's own tag."""
        return "{" + self.namespace + "}:session:" + digest

    # -- a task's keys, and the book-wide ones every event may touch ---------------------

    task = _per_id("t")
    """Hash with a task's short fields."""
    history = _per_id("h")
    """List of a task's recorded events (JSON); index N-1 produced version N."""
    output = _per_id("o")
    """Stream of a task's output chunks (extension, lua/output.lua): entry 0-<n> is chunk n."""
    callback = _per_id("c")
    """Marker that a callback id was applied (but see ``Shard.marker``)."""

    delivery = _per_id("d")
    """A delivery receipt (JSON) under its idempotency key."""
    group = _per_id("g")
    """Hash of a group's counters (extension)."""
    group_members = _per_id("gm")
    """Sorted set of a group's member ids, by creation order."""
    group_outbox = _Tagged("groups")
    """Stream of group notifications, one per declared group whose members all ended."""
    task_audit = _per_id("a")
    """List of a task's audit entries (JSON), oldest first: its latest changes by hand."""
    audit_log = _Tagged("audit")
    """Stream of every audit entry of the namespace, capped (``XADD MAXLEN ~``)."""
    deadlines = _Tagged("deadlines")
    """Sorted set of live task ids by deadline (``expiresAtMs``): the sweep's work list."""
    last_sweep = _Tagged("swept")
    """String: when a sweep last ran (ms, the server's clock), written by the sweep."""
    sweep_lease = _Tagged("sweep-lease")
    """String with a short expiry: which process sweeps the namespace this second."""
    batch_halt = _per_id("batch-halt")
    """String, only inside one MULTI/EXEC of apply calls (``apply_many``), the batch's own
    (its token): set by a call refused for facts, so that the calls after it write
    nothing; the batch's last call deletes it."""
    slot_running = _per_id("sr")
    """Sorted set of a concurrency key's running task ids, by their lease's end (slots.lua)."""
    slot_line = _per_id("sl")
    """List of a concurrency key's waiting task ids, oldest first."""
    slot_payloads = _per_id("sp")
    """Hash of a concurrency key's waiting task ids to what runs each again."""
    stalls = _Tagged("stalls")
    """Sorted set of running task ids with a heartbeat timeout, by when they stall."""
    counters = _Tagged("counters")
    """Hash counting the book's answers by reason (for metrics)."""
    outbox = _Tagged("outbox")
    """Stream of notifications, one per terminal state."""
    changes_channel = _Tagged("changes")
    """Pub/sub channel announcing every change: JSON taskId, version, state, progress."""
    cancels_channel = _Tagged("changes:cancelled")
    """Pub/sub channel of the cancels only (as on ``changes_channel``): what workers follow."""

    index_changes = _Tagged("ix")
    """Stream of the changes the state and sort indexes have yet to take (one entry per
    write that moves a task: _info.lua's index_change); ``_indexer`` applies them in
    batches and trims them, so every entry in it is still to be indexed."""

    state_index = _per_id("idx")
    """Sorted set of the task ids in one state, scored by creation order."""

    @property
    def state_indexes(self) -> list[str]:
        """One index per state, in ``STATE_NAMES`` order."""
        return [self.state_index(state) for state in STATE_NAMES]

    @property
    def sequence(self) -> str:
        """Counter giving each created task its creation order. A shard's counter names
        its shard (``:seq:<k>:<S>``): _create.lua then gives creation orders that are
        unique across the shards and follow the server's clock, so shards merge by them."""
        if self.shard_total == 1:
            return f"{self.tag}:seq"
        return f"{self.tag}:seq:{self.shard_index}:{self.shard_total}"

    # -- the operator console's keys (sent to lua/_info.lua in KEYS, see _facts.py) -----

    info = _per_id("i")
    """Hash of a task's long info fields: args, kwargs, traceback."""
    message = _per_id("m")
    """String: a task's message as published (``KeptMessage``), kept for a resend."""
    children = _per_id("ch")
    """Sorted set of the tasks a task started (Celery's parent id), by creation order."""
    names = _Tagged("names")
    """Sorted set of task names, scored by when a task of the name was last created."""
    name_totals = _Tagged("nt")
    """Hash of running totals per task name (``<name>|<code>``...: _info.lua's count_minute)."""
    workers = _Tagged("workers")
    """Sorted set of workers, scored by when each was last seen."""
    worker_tasks = _per_id("w")
    """Sorted set of a worker's latest 1,000 tasks (ids), scored by creation order."""
    worker_counts = _per_id("wc")
    """Hash of a worker's counts: started, succeeded, failed."""
    fleet = _Tagged("fleet")
    """Sorted set of the workers that announced themselves, by when each last renewed its
    record (``_fleet``; trimmed to a day and 500 workers; on the first shard)."""
    worker_record = _per_id("wr")
    """String: a worker's last record (JSON ``WorkerRecord``), kept a day."""
    worker_live = _per_id("wl")
    """String: present while a worker is online (its record's pid; expires after the
    silence that makes it offline, deleted at a graceful shutdown)."""

    def name_index(self, state: str, name: str) -> str:
        """Sorted set of one task name's ids in one state, scored by creation order."""
        return f"{self.tag}:n:{state}:{escape_id(name)}"

    def name_indexes(self, name: str) -> list[str]:
        """One index per state for a task name, in ``STATE_NAMES`` order."""
        return [self.name_index(state, name) for state in STATE_NAMES]

    sort_index = _per_id("by")
    """Sorted set of the task ids with a value of a ``SORT_INDEXED`` field, by it (ties:
    member order)."""

    @property
    def sort_indexes(self) -> list[str]:
        """The sort indexes the scripts keep, in ``SORT_INDEXED`` order."""
        return [self.sort_index(field) for field in SORT_INDEXED]

    def stats(self, hour: int, name: str | None) -> str:
        """Hash of one hour's per-minute counts, of one task name or (None) of all."""
        if name is None:
            return f"{self.tag}:sa:{hour}"
        return f"{self.tag}:s:{hour}:{escape_id(name)}"
