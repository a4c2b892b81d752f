"""``RedisBook``: the durable book, one atomic Lua call per change, on redis-py.

Follows docs/spec.md exactly as ``MemoryBook`` does (a differential test holds them to the
same results): the table (``_surface``) run on the sync driver, and what only it does.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from redis.cluster import RedisCluster

from .._book import HeldWrites, ScriptedWrite
from . import _expiries as expiries
from . import _operations as operations
from ._async_book import AsyncRedisBook
from ._base import BookBase
from ._book_driver import Driver
from ._changes import Change, follow_changes
from ._deferred import DeferredWrites
from ._engine import Engine
from ._merged import on
from ._pending import register
from ._scripts import BookScript, ScriptedEvents
from ._sender import CreateSender

log = logging.getLogger(__name__)

_T = TypeVar("_T")

__all__ = ["BesideScript", "RedisBook", "ShardDue", "same_server"]


def _address(client: Any) -> tuple[Any, ...]:
    """Where a client's commands go: host, port, db and socket path (behind Sentinel,
    the master it names now)."""
    pool = client.connection_pool
    kwargs = pool.connection_kwargs
    if hasattr(pool, "get_master_address"):
        host, port = pool.get_master_address()
        return (host, port, kwargs.get("db") or 0, None)
    return (kwargs.get("host"), kwargs.get("port"), kwargs.get("db") or 0, kwargs.get("path"))


def same_server(book_client: Any, client: Any) -> bool:
    """True if both clients send their commands to one server and db (a book on a
    Cluster never: its keys spread over many)."""
    return not isinstance(book_client, RedisCluster) and _address(book_client) == _address(client)


@dataclass(frozen=True, slots=True)
class BesideScript:
    """A caller's script, registered as an events script of a book, and the book's
    ``apply_in_script``, which runs it with a task's events."""

    apply_in_script: Callable[..., ScriptedEvents]
    script: BookScript
    retention: timedelta | None
    """The book's retention of ended tasks."""
    engine: Engine
    """Its one shard's engine (``sender``)."""

    def sender(self) -> DeferredWrites | None:
        """Its calls written at once, their answers read later (``_deferred``); None when
        each write waits for its replicas."""
        engine = self.engine
        return None if engine.wait.replicas else DeferredWrites(engine, self.script)

    def apply(self, write: ScriptedWrite) -> ScriptedEvents:
        """The write's events and the script, in one call."""
        task_id, items, key, args, name, group_id = write
        return self.apply_in_script(
            task_id, items, self.script, key, args, name=name, group_id=group_id
        )


class ShardDue:
    """One shard as the sweep sees it (``RedisBook.each_shard``): its overdue tasks, and
    the book's ``expire_many`` (which checks their groups)."""

    def __init__(self, book: RedisBook, index: int) -> None:
        self.driver = book.driver
        self.index = index
        """Which shard."""
        self.expire_many = book.expire_many

    def overdue(self, now_ms: int | float, limit: int = 1000) -> list[str]:
        """The shard's live tasks due at ``now_ms``, earliest first."""
        plan = operations.overdue(self.driver.ns.shards[self.index], now_ms, limit)
        return self.driver.run(on(self.index, plan, writes=False))

    def expire_counted(self, task_ids: list[str]) -> list[Any]:
        """``expire_many`` as the sweep reads it: compact answers (``EventOutcome``: no
        task built) on one shard; on several, a group check over shards needs each task."""
        if self.driver.ns.count > 1:
            return self.expire_many(task_ids, full_task=False)
        plan = expiries.expire_many(self.driver.ns.first, task_ids, expiries.COMPACT)
        return self.driver.run(on(0, plan))

    def expire_overlapped(
        self, now_ms: int | float, batch: int, max_batches: int, tally: expiries.Tally
    ) -> bool:
        """The sweep's expiries with one call in flight while the client reads the last
        (``_expiries.overlapped``): on one shard of a plain client; False where it cannot
        (or its connection failed), and the sweep goes batch by batch."""
        engine = self.driver.engines[0]
        if self.driver.ns.count > 1 or not expiries.overlaps(engine):
            return False
        due = self.driver.run(on(0, expiries.first_due(engine.layout, now_ms, 2 * batch)))
        return expiries.overlapped(engine, due, now_ms, batch, max_batches, tally)


class RedisBook(BookBase):
    """A book in Redis: durable, shared by workers, beat and the status server."""

    driver: Driver
    engine: Engine

    def shard_map(self) -> dict[str, list[int]]:
        """Which node holds which shards: ``host:port`` (or the socket's path) -> shard
        indexes (one entry on a single Redis)."""
        nodes: dict[str, list[int]] = {}
        for index, engine in enumerate(self.driver.engines):
            kwargs = engine.slot_client().connection_pool.connection_kwargs
            node = f"{kwargs.get('host') or kwargs.get('path')}:{kwargs.get('port', '')}"
            nodes.setdefault(node, []).append(index)
        return nodes

    def each_shard(self, call: Callable[[ShardDue], _T]) -> list[_T]:
        """``call`` on each shard's ``ShardDue`` (``asyncbook.sweep``): the shards of one
        node in turn, the nodes at once (a thread each); the answers in shard order."""

        def in_turn(indexes: list[int]) -> list[tuple[int, _T]]:
            return [(index, call(ShardDue(self, index))) for index in indexes]

        nodes = list(self.shard_map().values())
        if len(nodes) == 1:
            return [answer for _index, answer in in_turn(nodes[0])]
        answers = dict(pair for pairs in self.driver.pool().map(in_turn, nodes) for pair in pairs)
        return [answers[index] for index in range(self.shards)]

    def check_server(self, *, reading: bool = False) -> str | None:
        """Check the book's server (once per book, one round trip); returns its
        ``maxmemory-policy`` (None when INFO is refused). Called before the first write.
        ``reading``: the caller only reads (a sharded book then checks the namespace's
        shard count but does not store it; one shard stores none either way).

        Raises ``UnsupportedServerError`` when the server runs no Lua scripts (Valkey can
        be built or started without its Lua engine) or is older than Redis 7.0 or
        Valkey 8.1. Warns when the server may evict: with any ``maxmemory-policy`` but
        ``noeviction`` (``allkeys-lru`` and ``volatile-lru`` are defaults on some managed
        services) a full server drops keys of live tasks or half of a task's record.
        """
        policy = self.driver.run(self._server_check(reading))
        if self.shards > 1:
            log.info(
                "asyncbook: namespace %r has %d shards: %s",
                self.namespace,
                self.shards,
                "; ".join(f"{node} holds {ids}" for node, ids in self.shard_map().items()),
            )
        return policy

    def check_eviction_policy(self) -> str | None:
        """The server's ``maxmemory-policy``, warned about as ``check_server`` does."""
        return self.check_server()

    def create_sender(self) -> CreateSender | None:
        """A ``CreateSender`` on this book: creates written at once, answers read later
        (one slot's pipelines: None for a namespace of several shards, whose creates go
        to many nodes)."""
        return CreateSender(self.engine) if self.shards == 1 else None

    def wait_for_writes(self, writes: HeldWrites) -> None:
        """This process's books of this namespace wait for ``writes`` before they read
        or apply (a publisher reads its own creates, sent behind ``apply_async``)."""
        register(self.namespace, writes)

    def watch_cancels(
        self,
        on_cancel: Callable[[str], None],
        *,
        on_subscribe: Callable[[], None],
        stop: Callable[[], bool],
    ) -> Callable[[], None]:
        """``follow_changes`` on every shard's cancels channel (no other change wakes it)."""

        def on_change(change: Change) -> None:
            if change.state == "cancelled":
                on_cancel(change.task_id)

        channels = [shard.keys.cancels_channel for shard in self.ns.shards]
        return functools.partial(
            follow_changes, self.client, channels, on_change, on_subscribe, stop=stop
        )

    def async_twin(self) -> AsyncRedisBook | None:
        """``AsyncRedisBook.twin_of(self)`` (None only on a client of another make)."""
        return AsyncRedisBook.twin_of(self)

    def script_beside(self, client: object, source: str) -> BesideScript | None:
        """``source`` as an ``events_script``, when ``client`` is on this book's server
        (one slot's script: None for a namespace of several shards): the caller's Lua
        and the book's events in one script call (asyncbook's Celery result backend
        writes Celery's meta so, atomically with the book's events)."""
        if self.shards > 1 or not same_server(self.client, client):
            return None
        script, engine = self.events_script(source), self.engine
        return BesideScript(self.apply_in_script, script, self.retention, engine)
