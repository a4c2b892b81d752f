"""``RedisBook``: the durable book, one atomic Lua call per change.

Follows docs/spec.md exactly as ``MemoryBook`` does (a differential test holds them to the
same results). Event shapes are checked in Python; every rule that reads stored state
runs inside the script, in the reference's order. The book holds an ``Engine``
(``_engine``: its client, key schema, scripts and call builders) and delegates to it and
to the modules that take it: ``_operations`` and ``_console`` (plans), ``_batches`` (many
calls at once), ``_outbox`` (the notification streams), ``_sender`` (creates sent
without waiting). The scripts' arguments are built in ``_args``, their replies read in
``_replies``. Long because it is the book's whole public surface: one short method per
call, each delegating to a plan.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar, Self, Unpack

from .._audit import AuditEntry
from .._book import ApplyItem, CreateOptions, CreateSpec, EventInput, HeldWrites, ScriptedWrite
from .._checks import require_integer, require_non_negative, require_string, require_text
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
from . import _audit as audits
from . import _batches as batches
from . import _console, _stats
from . import _expiries as expiries
from . import _operations as operations
from . import _outbox as outbox
from ._args import dumps, utf8
from ._async_book import AsyncRedisBook
from ._base import BookBase
from ._beside import BesideScript, same_server
from ._changes import Change, follow_changes
from ._connection import reports_outages
from ._engine import Engine
from ._gauges import gauges
from ._pending import register
from ._plan import server_time
from ._replies import created, group_summary_of
from ._script_args import SealGroupArgs, TaskIdsArgs
from ._scripts import BookScript, ScriptedEvents
from ._sender import CreateSender

__all__ = ["RedisBook"]


class RedisBook(BookBase):
    """A book in Redis: durable, shared by workers, beat and the status server."""

    engine_type = Engine
    engine: Engine
    sharded_type: ClassVar[type[RedisBook] | None] = None
    """``ShardedRedisBook``, which ``RedisBook(..., shards=S)`` builds for S > 1 (set
    where it is defined, so that this module does not import it)."""

    def __new__(cls, *args: Any, shards: int = 1, **settings: Any) -> Self:
        if cls is RedisBook and shards != 1 and cls.sharded_type is not None:
            return super().__new__(cls.sharded_type)  # type: ignore[return-value]
        return super().__new__(cls)

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
        return self.engine.run(operations.check_server(self.layout))

    def check_eviction_policy(self) -> str | None:
        """The server's ``maxmemory-policy``, warned about as ``check_server`` does."""
        return self.check_server()

    # -- creating and reading -------------------------------------------------------

    @reports_outages
    def create(self, **options: Unpack[CreateOptions]) -> AsyncTask:
        """Store a new queued task; an existing id is ``conflict`` unless ``exist_ok``.

        With ``heartbeat_timeout_ms`` a running attempt silent for that long is ended by
        ``end_stalled`` (retryable when ``retry_on_stall``). With ``group_id`` the task is
        a member of that group (``group``, ``seal_group``). ``info`` is kept for the
        console (``info``, ``search``, ``stats``); the task itself does not show it.
        """
        spec = CreateSpec(**options)
        task, keys, args = self.engine.create_call(spec)
        self.engine.before_write()
        return created(spec.id, task, self.engine.scripts.create(keys=keys, args=args))

    @reports_outages
    def create_many(self, specs: Iterable[CreateSpec]) -> list[AsyncTask | AsyncBookError]:
        """``create`` for each spec, in one pipelined round trip (each atomic on its own);
        a spec the book refuses answers its error in its place."""
        return batches.create_many(self.engine, specs)

    def create_sender(self) -> CreateSender:
        """A ``CreateSender`` on this book: creates written at once, answers read later."""
        return CreateSender(self.engine)

    @reports_outages
    def get(self, id: str) -> AsyncTask | None:
        """The stored task with its history, or None."""
        return self.engine.run(operations.get(self.layout, id))

    # -- applying events ---------------------------------------------------------------

    @reports_outages
    def apply(
        self, task_id: str, event: EventInput, callback_id: str | None = None
    ) -> CallbackResult:
        """Apply one event; a callback id already recorded changes nothing."""
        return self.engine.run(operations.apply(self.layout, task_id, event, callback_id))

    @reports_outages
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
        plan = audits.cancel(self.layout, task_id, reason, at_ms, callback_id, actor)
        return self.engine.run(plan)

    @reports_outages
    def audit(
        self, task_id: str | None = None, *, since_ms: int | float | None = None, limit: int = 100
    ) -> list[AuditEntry]:
        """Audit entries, newest first: the task's, or (no ``task_id``) the namespace's."""
        return self.engine.run(audits.read(self.layout, task_id, since_ms, limit))

    @reports_outages
    def record_audit(
        self, task_id: str, action: str, actor: str, reason: str | None, outcome: str
    ) -> None:
        """Record a change another call made to an existing task (a resend of your own;
        ``Resender`` records its resends itself): one entry."""
        self.engine.run(audits.record(self.layout, task_id, action, actor, reason, outcome))

    @reports_outages
    def expire(self, task_id: str) -> AsyncTransition:
        """Expire the task at its deadline, as the sweep does (notified at the deadline)."""
        return self.engine.run(operations.expire(self.layout, task_id)).transition()

    @reports_outages
    def apply_many(
        self, items: Iterable[ApplyItem], *, full_task: bool = True
    ) -> list[CallbackResult | AsyncBookError]:
        """Apply many events in one pipelined round trip, each atomic on its own.

        With ``full_task=False`` each result's task comes without its history (cheaper,
        for callers that only need the reasons, such as the sweep).
        """
        return batches.apply_many_then(self.engine, list(items), full_task, None)[0]

    @reports_outages
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
        extra = (script, keys, args)
        results, reply = batches.apply_many_then(self.engine, list(items), full_task, extra)
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

    @reports_outages
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
        call = (script, key, args)
        return batches.apply_in_script(self.engine, task_id, items, call, name, group_id)

    @reports_outages
    def expire_many(
        self, task_ids: Iterable[str], *, full_task: bool = True
    ) -> list[AsyncTransition | AsyncBookError]:
        """Expire many tasks at their deadlines: one script call per thousand (each
        expiry is ``expire``'s, atomic on its own)."""
        results = expiries.expire_many(self.engine, task_ids, full_task)
        return [r if isinstance(r, AsyncBookError) else r.transition() for r in results]

    # -- reconnecting and delivering ----------------------------------------------------

    @reports_outages
    def resume(self, task_id: str, cursor_version: int, *, full_task: bool = True) -> ResumeResult:
        """What changed after ``cursor_version``: caught-up, a delta, or a snapshot.

        With ``full_task=False`` a caught-up or delta answer carries the task without its
        history, so it costs O(events returned) however long the history is.
        """
        return self.engine.run(operations.resume(self.layout, task_id, cursor_version, full_task))

    @reports_outages
    def deliver_result(
        self, task_id: str, idempotency_key: str, now_ms: int | float
    ) -> DeliveryResult:
        """Hand the result over once per idempotency key."""
        return self.engine.run(
            operations.deliver_result(self.layout, task_id, idempotency_key, now_ms)
        )

    # -- notifications (``_outbox``) ---------------------------------------------------

    @reports_outages
    def drain_notifications(self) -> list[Notification]:
        """Every pending notification, sorted by task id then time; empties the outbox."""
        return outbox.drain_notifications(self.engine)

    @reports_outages
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
        return outbox.consume_notifications(self.engine, group, consumer, reading)

    @reports_outages
    def ack(self, group: str, *entry_ids: str) -> int:
        """Acknowledge handled notifications; returns how many were pending."""
        return outbox.ack(self.engine, self.keys.outbox, group, entry_ids)

    @reports_outages
    def drain_group_notifications(self) -> list[GroupNotification]:
        """Every pending group notification, in order; empties their stream."""
        return outbox.drain_group_notifications(self.engine)

    @reports_outages
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
        return outbox.consume_group_notifications(self.engine, group, consumer, reading)

    @reports_outages
    def ack_group_notifications(self, group: str, *entry_ids: str) -> int:
        """Acknowledge handled group notifications; returns how many were pending."""
        return outbox.ack(self.engine, self.keys.group_outbox, group, entry_ids)

    # -- indexes ------------------------------------------------------------------------

    @reports_outages
    def overdue(self, now_ms: int | float, limit: int = 1000) -> list[str]:
        """Ids of live tasks whose deadline is at or before ``now_ms``, earliest first."""
        return self.engine.run(operations.overdue(self.layout, now_ms, limit))

    @reports_outages
    def overdue_count(self, now_ms: int | float) -> int:
        """How many live tasks have a deadline at or before ``now_ms`` (one ZCOUNT)."""
        return self.engine.run(operations.overdue_count(self.layout, now_ms))

    @reports_outages
    def record_sweep(self, at_ms: int | float) -> None:
        """Note that a sweep ran at ``at_ms`` (kept without expiry: one small key)."""
        self.engine.run(operations.record_sweep(self.layout, at_ms))

    @reports_outages
    def last_sweep_ms(self) -> int | None:
        """When a sweep last ran, or None if none ever did."""
        return self.engine.run(operations.last_sweep_ms(self.layout))

    @reports_outages
    def claim_sweep(self, owner: str, lease_ms: int) -> bool:
        """Take the namespace's sweep lease for ``lease_ms`` if nobody holds it, or renew it
        if ``owner`` does (``SET NX PX GET``): True if ``owner`` may sweep now. A holder
        that stops renewing (it died) is replaced once its lease lapses."""
        return self.engine.run(operations.claim_sweep(self.layout, owner, lease_ms))

    @reports_outages
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
        return self.engine.run(operations.list_tasks(self.layout, state, limit, after, full_task))

    @reports_outages
    def heartbeat(self, task_ids: Iterable[str]) -> int:
        """Say that these tasks' running attempts are alive: one round trip for them all."""
        ids = [utf8(require_string(task_id, "taskId"), "taskId") for task_id in task_ids]
        if not ids:
            return 0
        keys = [self.keys.stalls, self.keys.workers, *(self.keys.task(task_id) for task_id in ids)]
        args = TaskIdsArgs(tuple(ids)).argv()
        return int(self.engine.scripts.heartbeat(keys=keys, args=args))

    @reports_outages
    def end_stalled(
        self, now_ms: int | float | None = None, limit: int = 1000
    ) -> list[CallbackResult | AsyncBookError]:
        """Fail every running task whose heartbeat is overdue (by the server's clock).

        The script checks again, atomically, that the task is still overdue, so a
        heartbeat that arrives meanwhile wins; each fail carries a callback id naming the
        stall, so two sweeps fail a task once.
        """
        now = self.now_ms() if now_ms is None else require_non_negative(now_ms, "nowMs")
        return batches.end_stalled(self.engine, now, limit)

    @reports_outages
    def last_cursor(self, task_id: str) -> str | None:
        """The cursor of the last progress the task reported (its checkpoint), or None."""
        return self.engine.run(operations.last_cursor(self.layout, task_id))

    @reports_outages
    def seal_group(self, group_id: str, total: int) -> GroupSummary:
        """Declare that ``group_id`` has ``total`` members: once they have all ended, one
        group notification (at once if they already have)."""
        group = utf8(require_text(group_id, "groupId"), "groupId")
        size = require_integer(total, "total", 1)
        flat = self.engine.scripts.seal_group(
            keys=[self.keys.group(group), self.keys.group_members(group), self.keys.group_outbox],
            args=SealGroupArgs(
                dumps(group, "groupId"), size, self.now_ms(), self.layout.retention_ms
            ).argv(),
        )
        return group_summary_of(group, flat)

    @reports_outages
    def group(self, group_id: str) -> GroupSummary | None:
        """The group's counts by state and its progress: one round trip, O(1)."""
        return self.engine.run(operations.group(self.layout, group_id))

    @reports_outages
    def group_members(self, group_id: str, limit: int = 100) -> list[AsyncTask]:
        """The group's members in creation order (without histories), up to ``limit``."""
        return self.engine.run(operations.group_members(self.layout, group_id, limit))

    @reports_outages
    def now_ms(self) -> int:
        """The Redis server's clock (TIME): one clock for every worker, beat and client."""
        return self.engine.run(server_time())

    # -- the operator console -------------------------------------------------------

    @reports_outages
    def info(self, task_id: str) -> TaskInfo | None:
        """A task's info (Celery name, arguments, queue, worker, times, traceback), or
        None when the book does not hold the task."""
        return self.engine.run(_console.info(self.layout, task_id))

    @reports_outages
    def search(self, query: TaskQuery | None = None, /, **filters: Any) -> SearchPage:
        """One page of tasks matching a ``TaskQuery`` (or its fields as keywords: name,
        state, worker, q, since_ms, until_ms, sort, limit, after), with totals per state."""
        given = TaskQuery(**filters) if query is None else query
        return self.engine.run(_console.search(self.layout, given))

    @reports_outages
    def workers(self, within_ms: int = 86_400_000) -> list[WorkerSummary]:
        """Workers seen in the last ``within_ms``, most recently seen first."""
        return self.engine.run(_console.workers(self.layout, within_ms))

    @reports_outages
    def stats(
        self, name: str | None = None, window_ms: int = 3_600_000, now_ms: int | None = None
    ) -> TaskStats:
        """Per-minute starts, ends by state and runtime percentiles of one task name (None:
        every task) over the last ``window_ms`` (one minute to a day): one round trip."""
        return self.engine.run(_stats.stats(self.layout, name, window_ms, now_ms))

    @reports_outages
    def task_names(self, within_ms: int | None = None) -> list[str]:
        """Task names the book has seen (created within ``within_ms``), sorted."""
        return self.engine.run(_console.task_names(self.layout, within_ms))

    @reports_outages
    def name_totals(self) -> list[NameTotals]:
        """Running totals per task name, for Prometheus counters and histograms."""
        return self.engine.run(_stats.name_totals(self.layout))

    @reports_outages
    def gauges(self, now_ms: int, within_ms: int = GAUGE_WORKERS_WITHIN_MS) -> BookGauges:
        """What ``/metrics`` reads beyond the counts: the notification streams, their
        consumer groups and the workers seen (``_gauges``), in one round trip."""
        return self.engine.run(gauges(self.layout, now_ms, within_ms))

    @reports_outages
    def count_by_state(self) -> dict[str, int]:
        """How many tasks each state index holds (one pipelined round trip)."""
        return self.engine.run(operations.count_by_state(self.layout))

    @reports_outages
    def transition_counts(self) -> dict[str, int]:
        """How many times each reason was answered, by every client of this book."""
        return self.engine.run(operations.transition_counts(self.layout))

    @reports_outages
    def prune(self, limit: int = 1000) -> int:
        """Drop index entries of ended tasks whose records expired; returns how many.

        Looks at up to ``limit`` entries per index (each terminal state's, each task
        name's, each worker's and each sort index), in index order, resuming where the previous call
        stopped, so regular calls (the sweep makes one per pass) visit every entry in turn.
        """
        if self.retention is None:
            return 0
        return batches.prune(self.engine, limit)

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
        """``follow_changes`` on the book's cancels channel (no other change wakes it)."""

        def on_change(change: Change) -> None:
            if change.state == "cancelled":
                on_cancel(change.task_id)

        channel = self.keys.cancels_channel
        return functools.partial(
            follow_changes, self.client, channel, on_change, on_subscribe, stop=stop
        )

    def async_twin(self) -> AsyncRedisBook | None:
        """``AsyncRedisBook.twin_of(self)``: None on a Cluster, Sentinel, fakeredis..."""
        return AsyncRedisBook.twin_of(self)

    def script_beside(self, client: object, source: str) -> BesideScript | None:
        """``source`` as an ``events_script``, when ``client`` is on this book's server."""
        if not same_server(self.client, client):
            return None
        return BesideScript(self._apply_write, self.events_script(source), self.retention)

    def _apply_write(self, write: ScriptedWrite, script: BookScript) -> ScriptedEvents:
        task_id, items, key, args, name, group_id = write
        return self.apply_in_script(task_id, items, script, key, args, name=name, group_id=group_id)
