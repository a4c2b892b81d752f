"""``RedisBook``: the durable book, one atomic Lua call per change, on redis-py.

Follows docs/spec.md exactly as ``MemoryBook`` does (a differential test holds them to the
same results). A thin facade: each method runs one namespace plan (``_task_ops``,
``_reads``) on the sync driver (``_book_driver``), the same plans ``AsyncRedisBook`` awaits,
for a namespace of one shard or many (``_surface`` lists the calls both offer).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar, Unpack

from .._audit import AuditEntry
from .._book import ApplyItem, CreateOptions, CreateSpec, EventInput, HeldWrites, ScriptedWrite
from .._console import NameTotals, SearchPage, TaskInfo, TaskQuery, TaskStats, WorkerSummary
from .._gauges import GAUGE_WORKERS_WITHIN_MS, BookGauges
from .._models import (
    AsyncTask,
    AsyncTransition,
    CallbackResult,
    DeliveryResult,
    GroupNotification,
    GroupSummary,
    Notification,
    ResumeResult,
    TaskPage,
)
from ..errors import AsyncBookError
from . import _groups as groups
from . import _operations as operations
from . import _outbox as outbox
from . import _reads as reads
from . import _task_ops as tasks
from ._async_book import AsyncRedisBook
from ._base import BookBase
from ._beside import BesideScript, same_server
from ._book_driver import Driver
from ._changes import Change, follow_changes
from ._engine import Engine
from ._merged import on
from ._namespace import Namespace
from ._pending import register
from ._scripts import BookScript, ScriptedEvents
from ._sender import CreateSender
from ._shard_due import ShardDue

log = logging.getLogger(__name__)

_T = TypeVar("_T")

__all__ = ["RedisBook"]


class RedisBook(BookBase):
    """A book in Redis: durable, shared by workers, beat and the status server."""

    driver: Driver

    def _driver(self, client: Any, ns: Namespace) -> Driver:
        return Driver(client, ns)

    @property
    def engine(self) -> Engine:
        """Shard 0's engine (the one shard's, when S = 1)."""
        return self.driver.engines[0]

    def fix_count(self) -> None:
        """Store the namespace's shard count at its first use, or check it (once)."""
        self.ns.count_check.fix(self.client)

    def shard_map(self) -> dict[str, list[int]]:
        """Which node holds which shards: ``host:port`` -> shard indexes (one entry on a
        single Redis)."""
        return self.driver.shard_map()

    def each_shard(self, call: Callable[[ShardDue], _T]) -> list[_T]:
        """``call`` on each shard's view (its ``overdue`` and ``expire_many``): the
        shards of one node in turn, the nodes at once (a thread each); the answers in
        shard order. The sweep expires each shard's due tasks this way
        (``asyncbook.sweep``)."""
        return self.driver.by_node(lambda index: call(ShardDue(self.driver, index)))

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
        if self.shards > 1 and not reading:
            self.fix_count()
        policies = sorted(
            {p for p in self.driver.run(reads.check_server(self.ns)) if p is not None}
        )
        if self.shards > 1:
            log.info(
                "asyncbook: namespace %r has %d shards: %s",
                self.namespace,
                self.shards,
                "; ".join(f"{node} holds {ids}" for node, ids in self.shard_map().items()),
            )
        return policies[0] if policies else None

    def check_eviction_policy(self) -> str | None:
        """The server's ``maxmemory-policy``, warned about as ``check_server`` does."""
        return self.check_server()

    # -- creating and reading -------------------------------------------------------

    def create(self, **options: Unpack[CreateOptions]) -> AsyncTask:
        """Store a new queued task; an existing id is ``conflict`` unless ``exist_ok``.

        With ``heartbeat_timeout_ms`` a running attempt silent for that long is ended by
        ``end_stalled`` (retryable when ``retry_on_stall``). With ``group_id`` the task is
        a member of that group (``group``, ``seal_group``). ``info`` is kept for the
        console (``info``, ``search``, ``stats``); the task itself does not show it.
        """
        return self.driver.run(tasks.create(self.ns, CreateSpec(**options)))

    def create_many(self, specs: Iterable[CreateSpec]) -> list[AsyncTask | AsyncBookError]:
        """``create`` for each spec, in one pipelined round trip (each atomic on its own);
        a spec the book refuses answers its error in its place."""
        return self.driver.run(tasks.create_many(self.ns, specs))

    def create_sender(self) -> CreateSender | None:
        """A ``CreateSender`` on this book: creates written at once, answers read later
        (one slot's pipelines: None for a namespace of several shards, whose creates go
        to many nodes)."""
        return CreateSender(self.engine) if self.shards == 1 else None

    def get(self, id: str) -> AsyncTask | None:
        """The stored task with its history, or None."""
        return self.driver.run(reads.get(self.ns, id))

    # -- applying events ---------------------------------------------------------------

    def apply(
        self, task_id: str, event: EventInput, callback_id: str | None = None
    ) -> CallbackResult:
        """Apply one event; a callback id already recorded changes nothing."""
        return self.driver.run(tasks.apply(self.ns, task_id, event, callback_id))

    def cancel(
        self,
        task_id: str,
        reason: str | None = None,
        *,
        at_ms: int | float | None = None,
        callback_id: str | None = None,
        actor: str | None = None,
    ) -> CallbackResult:
        """Cancel a queued or running task (extension): ``apply`` of a ``cancel`` event.

        ``at_ms`` defaults to the Redis server's clock. With ``actor`` the cancel and its
        audit entry are one script call (``_audit``).
        """
        return self.driver.run(tasks.cancel(self.ns, task_id, reason, at_ms, callback_id, actor))

    def audit(
        self, task_id: str | None = None, *, since_ms: int | float | None = None, limit: int = 100
    ) -> list[AuditEntry]:
        """Audit entries, newest first: the task's, or (no ``task_id``) the namespace's."""
        return self.driver.run(reads.audit(self.ns, task_id, since_ms, limit))

    def record_audit(
        self, task_id: str, action: str, actor: str, reason: str | None, outcome: str
    ) -> None:
        """Record a change another call made to an existing task (a resend of your own;
        ``Resender`` records its resends itself): one entry."""
        self.driver.run(tasks.record_audit(self.ns, task_id, action, actor, reason, outcome))

    def expire(self, task_id: str) -> AsyncTransition:
        """Expire the task at its deadline, as the sweep does (notified at the deadline)."""
        return self.driver.run(tasks.expire(self.ns, task_id)).transition()

    def apply_many(
        self, items: Iterable[ApplyItem], *, full_task: bool = True
    ) -> list[CallbackResult | AsyncBookError]:
        """Apply many events in one pipelined round trip, each atomic on its own.

        With ``full_task=False`` each result's task comes without its history (cheaper,
        for callers that only need the reasons, such as the sweep).
        """
        return self.driver.run(tasks.apply_many(self.ns, items, full_task))

    def apply_many_then(
        self,
        items: Iterable[ApplyItem],
        script: BookScript,
        keys: Sequence[str],
        args: Sequence[Any],
        *,
        full_task: bool = True,
    ) -> tuple[list[CallbackResult | AsyncBookError], Any]:
        """``apply_many`` and then one more script, all in one MULTI/EXEC: one round trip,
        nothing runs between them, and the script sees what the events changed.

        After Redis lost the scripts (SCRIPT FLUSH, a restart) the call is sent again
        with them: give the items callback ids, and make the script safe to run twice.

        ``script`` (a ``BookScript``, for instance from ``extra_script``) must touch only
        keys on the book's Redis (on a Cluster: in the book's slot). Returns the events'
        results and the script's reply; an error the script raised is raised.
        """
        plan = tasks.apply_many_then(self.ns, items, (script, keys, args), full_task)
        results, reply = self.driver.run(plan)
        if isinstance(reply, Exception):
            raise reply
        return results, reply

    def extra_script(self, source: str) -> BookScript:
        """A script of the caller's, registered on the book's client, for
        ``apply_many_then`` (no round trip until first use)."""
        return self.engine.register(source)

    def events_script(self, source: str) -> BookScript:
        """A script of the caller's for ``apply_in_script``: ``source`` runs with the task
        helpers and ``apply_event`` (apply.lua's body) in front of it."""
        return self.engine.register_with_helpers(source)

    def apply_in_script(
        self,
        task_id: str,
        items: Sequence[tuple[EventInput | None, str | None]],
        script: BookScript,
        key: str,
        args: Sequence[str],
        *,
        name: str | None = None,
        group_id: str | None = None,
    ) -> ScriptedEvents:
        """Events of one task and the caller's own Lua around them, in one script call.

        ``script`` (from ``events_script``) gets KEYS: the task's hash, its history,
        ``key``, apply.lua's KEYS 4..14, then one callback marker per event; ARGV:
        ``args``, the number of events, then apply.lua's ARGV per event (ApplyArgs). It
        applies them with ``apply_events(KEYS, ARGV, len(args) + 1)`` (_apply.lua) and
        answers ``{'!unknown'}`` (raised as ``UnknownTaskError``) or
        ``{status, state, answers}``, ``answers`` being what ``apply_events`` returned.
        An event None expires the task at its deadline (as ``expire``).

        ``key`` must be on the book's Redis; on a Cluster, in the book's slot. ``name``
        and ``group_id``, the task's name and group where the caller knows them (a
        worker does), save a round trip when this book has not seen the task before.
        """
        plan = tasks.apply_in_script(self.ns, task_id, items, (script, key, args), name, group_id)
        return self.driver.run(plan)

    def expire_many(
        self, task_ids: Iterable[str], *, full_task: bool = True
    ) -> list[AsyncTransition | AsyncBookError]:
        """Expire many tasks at their deadlines: one script call per thousand (each
        expiry is ``expire``'s, atomic on its own)."""
        results = self.driver.run(tasks.expire_many(self.ns, task_ids, full_task))
        return [r if isinstance(r, AsyncBookError) else r.transition() for r in results]

    # -- reconnecting and delivering ----------------------------------------------------

    def resume(self, task_id: str, cursor_version: int, *, full_task: bool = True) -> ResumeResult:
        """What changed after ``cursor_version``: caught-up, a delta, or a snapshot.

        With ``full_task=False`` a caught-up or delta answer carries the task without its
        history, so it costs O(events returned) however long the history is.
        """
        return self.driver.run(tasks.resume(self.ns, task_id, cursor_version, full_task))

    def deliver_result(
        self, task_id: str, idempotency_key: str, now_ms: int | float
    ) -> DeliveryResult:
        """Hand the result over once per idempotency key."""
        return self.driver.run(tasks.deliver_result(self.ns, task_id, idempotency_key, now_ms))

    # -- notifications (``_outbox``) ---------------------------------------------------

    def drain_notifications(self) -> list[Notification]:
        """Every pending notification, sorted by task id then time; empties the outbox."""
        return self.driver.run(reads.drain(self.ns, groups=False))

    def consume_notifications(
        self,
        group: str,
        consumer: str,
        count: int = 100,
        block_ms: int | None = None,
        min_idle_ms: int = 60_000,
    ) -> list[tuple[str, Notification]]:
        """Read notifications at least once: acknowledge each with ``ack`` when handled.

        Entries another consumer read but never acknowledged for ``min_idle_ms`` are
        claimed first; then new entries. The group is created on first use.
        """
        reading = outbox.Reading(count, block_ms, min_idle_ms)
        return self.driver.run(reads.consume(self.ns, False, group, consumer, reading))

    def ack(self, group: str, *entry_ids: str) -> int:
        """Acknowledge handled notifications; returns how many were pending."""
        return self.driver.run(reads.ack(self.ns, False, group, entry_ids))

    def drain_group_notifications(self) -> list[GroupNotification]:
        """Every pending group notification, in order; empties their stream."""
        return self.driver.run(reads.drain(self.ns, groups=True))

    def consume_group_notifications(
        self,
        group: str,
        consumer: str,
        count: int = 100,
        block_ms: int | None = None,
        min_idle_ms: int = 60_000,
    ) -> list[tuple[str, GroupNotification]]:
        """Group notifications, at least once: acknowledge with ``ack_group_notifications``."""
        reading = outbox.Reading(count, block_ms, min_idle_ms)
        return self.driver.run(reads.consume(self.ns, True, group, consumer, reading))

    def ack_group_notifications(self, group: str, *entry_ids: str) -> int:
        """Acknowledge handled group notifications; returns how many were pending."""
        return self.driver.run(reads.ack(self.ns, True, group, entry_ids))

    # -- indexes ------------------------------------------------------------------------

    def overdue(self, now_ms: int | float, limit: int = 1000) -> list[str]:
        """Ids of live tasks whose deadline is at or before ``now_ms``, earliest first."""
        return self.driver.run(reads.overdue(self.ns, now_ms, limit))

    def overdue_count(self, now_ms: int | float) -> int:
        """How many live tasks have a deadline at or before ``now_ms`` (one ZCOUNT)."""
        return self.driver.run(reads.overdue_count(self.ns, now_ms))

    def record_sweep(self, at_ms: int | float) -> None:
        """Note that a sweep ran at ``at_ms`` (kept without expiry: one small key)."""
        self.driver.run(on(0, operations.record_sweep(self.layout, at_ms)))

    def last_sweep_ms(self) -> int | None:
        """When a sweep last ran, or None if none ever did."""
        return self.driver.run(on(0, operations.last_sweep_ms(self.layout), writes=False))

    def claim_sweep(self, owner: str, lease_ms: int) -> bool:
        """Take the namespace's sweep lease for ``lease_ms`` if nobody holds it, or renew it
        if ``owner`` does (``SET NX PX GET``): True if ``owner`` may sweep now. A holder
        that stops renewing (it died) is replaced once its lease lapses."""
        return self.driver.run(on(0, operations.claim_sweep(self.layout, owner, lease_ms)))

    def list_tasks(
        self,
        state: str | None = None,
        limit: int = 50,
        after: str | None = None,
        *,
        full_task: bool = True,
    ) -> TaskPage:
        """Tasks, newest first, optionally in one state; ``after`` continues a page.

        With ``full_task=False`` the listed tasks come without their histories (the
        listing then reads no history at all).
        """
        return self.driver.run(reads.list_tasks(self.ns, state, limit, after, full_task))

    def heartbeat(self, task_ids: Iterable[str]) -> int:
        """Say that these tasks' running attempts are alive: one round trip for them all."""
        return self.driver.run(tasks.heartbeat(self.ns, task_ids))

    def end_stalled(
        self, now_ms: int | float | None = None, limit: int = 1000
    ) -> list[CallbackResult | AsyncBookError]:
        """Fail every running task whose heartbeat is overdue (by the server's clock).

        The script checks again, atomically, that the task is still overdue, so a
        heartbeat that arrives meanwhile wins; each fail carries a callback id naming the
        stall, so two sweeps fail a task once.
        """
        return self.driver.run(tasks.end_stalled(self.ns, now_ms, limit))

    def last_cursor(self, task_id: str) -> str | None:
        """The cursor of the last progress the task reported (its checkpoint), or None."""
        return self.driver.run(reads.last_cursor(self.ns, task_id))

    def seal_group(self, group_id: str, total: int) -> GroupSummary:
        """Declare that ``group_id`` has ``total`` members: once they have all ended, one
        group notification (at once if they already have)."""
        return self.driver.run(tasks.seal_group(self.ns, group_id, total))

    def group(self, group_id: str) -> GroupSummary | None:
        """The group's counts by state and its progress: one round trip, O(1)."""
        return self.driver.run(groups.summary(self.ns, group_id))

    def group_members(self, group_id: str, limit: int = 100) -> list[AsyncTask]:
        """The group's members in creation order (without histories), up to ``limit``."""
        return self.driver.run(groups.members(self.ns, group_id, limit))

    def now_ms(self) -> int:
        """The Redis server's clock (TIME): one clock for every worker, beat and client."""
        return self.driver.run(reads.now_ms(self.ns))

    # -- the operator console -------------------------------------------------------

    def info(self, task_id: str) -> TaskInfo | None:
        """A task's info (Celery name, arguments, queue, worker, times, traceback), or
        None when the book does not hold the task."""
        return self.driver.run(reads.info(self.ns, task_id))

    def search(self, query: TaskQuery | None = None, /, **filters: Any) -> SearchPage:
        """One page of tasks matching a ``TaskQuery`` (or its fields as keywords: name,
        state, worker, q, since_ms, until_ms, sort, limit, after), with totals per state."""
        given = TaskQuery(**filters) if query is None else query
        return self.driver.run(reads.search(self.ns, given))

    def workers(self, within_ms: int = 86_400_000) -> list[WorkerSummary]:
        """Workers seen in the last ``within_ms``, most recently seen first."""
        return self.driver.run(reads.workers(self.ns, within_ms))

    def stats(
        self, name: str | None = None, window_ms: int = 3_600_000, now_ms: int | None = None
    ) -> TaskStats:
        """Per-minute starts, ends by state and runtime percentiles of one task name (None:
        every task) over the last ``window_ms`` (one minute to a day): one round trip."""
        return self.driver.run(reads.stats(self.ns, name, window_ms, now_ms))

    def task_names(self, within_ms: int | None = None) -> list[str]:
        """Task names the book has seen (created within ``within_ms``), sorted."""
        return self.driver.run(reads.task_names(self.ns, within_ms))

    def name_totals(self) -> list[NameTotals]:
        """Running totals per task name, for Prometheus counters and histograms."""
        return self.driver.run(reads.name_totals(self.ns))

    def gauges(self, now_ms: int, within_ms: int = GAUGE_WORKERS_WITHIN_MS) -> BookGauges:
        """What ``/metrics`` reads beyond the counts: the notification streams, their
        consumer groups and the workers seen (``_gauges``), in one round trip."""
        return self.driver.run(reads.gauges(self.ns, now_ms, within_ms))

    def count_by_state(self) -> dict[str, int]:
        """How many tasks each state index holds (one pipelined round trip)."""
        return self.driver.run(reads.count_by_state(self.ns))

    def transition_counts(self) -> dict[str, int]:
        """How many times each reason was answered, by every client of this book."""
        return self.driver.run(reads.transition_counts(self.ns))

    def prune(self, limit: int = 1000) -> int:
        """Drop index entries of ended tasks whose records expired; returns how many.

        Looks at up to ``limit`` entries per index (each terminal state's, each task
        name's, each worker's and each sort index), in index order, resuming where the previous call
        stopped, so regular calls (the sweep makes one per pass) visit every entry in turn.
        """
        if self.retention is None:
            return 0
        return self.driver.run(reads.prune(self.ns, limit))

    # -- capabilities (AsyncBook): what a RedisBook can do that not every book can ------

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
        watched: str | list[str] = channels[0] if self.shards == 1 else channels
        return functools.partial(
            follow_changes, self.client, watched, on_change, on_subscribe, stop=stop
        )

    def async_twin(self) -> AsyncRedisBook | None:
        """``AsyncRedisBook.twin_of(self)`` (None only on a client of another make)."""
        return AsyncRedisBook.twin_of(self)

    def script_beside(self, client: object, source: str) -> BesideScript | None:
        """``source`` as an ``events_script``, when ``client`` is on this book's server
        (one slot's script: None for a namespace of several shards)."""
        if self.shards > 1 or not same_server(self.client, client):
            return None
        return BesideScript(self._apply_write, self.events_script(source), self.retention)

    def _apply_write(self, write: ScriptedWrite, script: BookScript) -> ScriptedEvents:
        task_id, items, key, args, name, group_id = write
        return self.apply_in_script(task_id, items, script, key, args, name=name, group_id=group_id)
