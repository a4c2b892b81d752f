"""The book's surface, written once: every call of ``RedisBook`` and ``AsyncRedisBook``
as a function of the namespace returning its namespace plan (``_merged``), with its
public signature and docstring. The facades are this table run by a driver (``sync``:
``_book_driver``, ``awaited``: ``_async_book_driver``); ``SURFACE`` names the calls both
offer, and a test holds each facade to it.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar, Unpack

from .._audit import AuditEntry
from .._book import ApplyItem, CreateOptions, CreateSpec, EventInput
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
from ._merged import MergedPlan, on
from ._namespace import Namespace
from ._plan import BookScript
from ._scripts import ScriptedEvents

if TYPE_CHECKING:
    from ._base import BookBase

__all__ = ["SURFACE", "awaited", "sync"]

_P = ParamSpec("_P")
_T = TypeVar("_T")


def sync(
    plan: Callable[Concatenate[Namespace, _P], MergedPlan[_T]],
) -> Callable[Concatenate[BookBase, _P], _T]:
    """A ``RedisBook`` method: ``plan`` of the book's namespace, run by its driver."""

    @functools.wraps(plan)
    def method(book: BookBase, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        answer: _T = book.driver.run(plan(book.ns, *args, **kwargs))
        return answer

    return method


def awaited(
    plan: Callable[Concatenate[Namespace, _P], MergedPlan[_T]],
) -> Callable[Concatenate[BookBase, _P], Awaitable[_T]]:
    """An ``AsyncRedisBook`` method: ``plan`` of the book's namespace, awaited on its
    driver."""

    @functools.wraps(plan)
    async def method(book: BookBase, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        answer: _T = await book.driver.run(plan(book.ns, *args, **kwargs))
        return answer

    return method


def create(ns: Namespace, **options: Unpack[CreateOptions]) -> MergedPlan[AsyncTask]:
    """Store a new queued task; an existing id is ``conflict`` unless ``exist_ok``.

    With ``heartbeat_timeout_ms`` a running attempt silent for that long is ended by
    ``end_stalled`` (retryable when ``retry_on_stall``). With ``group_id`` the task is
    a member of that group (``group``, ``seal_group``). ``info`` is kept for the
    console (``info``, ``search``, ``stats``); the task itself does not show it.
    """
    return tasks.create(ns, CreateSpec(**options))


def create_many(
    ns: Namespace, specs: Iterable[CreateSpec]
) -> MergedPlan[list[AsyncTask | AsyncBookError]]:
    """``create`` for each spec, in one pipelined round trip (each atomic on its own);
    a spec the book refuses answers its error in its place."""
    return tasks.create_many(ns, specs)


def get(ns: Namespace, id: str) -> MergedPlan[AsyncTask | None]:
    """The stored task with its history, or None."""
    return reads.get(ns, id)


def apply(
    ns: Namespace, task_id: str, event: EventInput, callback_id: str | None = None
) -> MergedPlan[CallbackResult]:
    """Apply one event; a callback id already recorded changes nothing."""
    return tasks.apply(ns, task_id, event, callback_id)


def cancel(
    ns: Namespace,
    task_id: str,
    reason: str | None = None,
    *,
    at_ms: int | float | None = None,
    callback_id: str | None = None,
    actor: str | None = None,
) -> MergedPlan[CallbackResult]:
    """Cancel a queued or running task (extension): ``apply`` of a ``cancel`` event.

    ``at_ms`` defaults to the Redis server's clock. With ``actor`` the cancel and its
    audit entry are one script call (``_audit``).
    """
    return tasks.cancel(ns, task_id, reason, at_ms, callback_id, actor)


def audit(
    ns: Namespace,
    task_id: str | None = None,
    *,
    since_ms: int | float | None = None,
    limit: int = 100,
) -> MergedPlan[list[AuditEntry]]:
    """Audit entries, newest first: the task's, or (no ``task_id``) the namespace's."""
    return reads.audit(ns, task_id, since_ms, limit)


def record_audit(
    ns: Namespace, task_id: str, action: str, actor: str, reason: str | None, outcome: str
) -> MergedPlan[None]:
    """Record a change another call made to an existing task (a resend of your own;
    ``Resender`` records its resends itself): one entry."""
    return tasks.record_audit(ns, task_id, action, actor, reason, outcome)


def expire(ns: Namespace, task_id: str) -> MergedPlan[AsyncTransition]:
    """Expire the task at its deadline, as the sweep does (notified at the deadline)."""
    return (yield from tasks.expire(ns, task_id)).transition()


def apply_many(
    ns: Namespace, items: Iterable[ApplyItem], *, full_task: bool = True
) -> MergedPlan[list[CallbackResult | AsyncBookError]]:
    """Apply many events in one pipelined round trip, each atomic on its own.

    With ``full_task=False`` each result's task comes without its history (cheaper,
    for callers that only need the reasons, such as the sweep).
    """
    return tasks.apply_many(ns, items, full_task)


def apply_many_then(
    ns: Namespace,
    items: Iterable[ApplyItem],
    script: BookScript,
    keys: Sequence[str],
    args: Sequence[Any],
    *,
    full_task: bool = True,
) -> MergedPlan[tuple[list[CallbackResult | AsyncBookError], Any]]:
    """``apply_many`` and then one more script, all in one MULTI/EXEC: one round trip,
    nothing runs between them, and the script sees what the events changed.

    After Redis lost the scripts (SCRIPT FLUSH, a restart) the call is sent again
    with them: give the items callback ids, and make the script safe to run twice.

    ``script`` (a ``BookScript``, for instance from ``extra_script``) must touch only
    keys on the book's Redis (on a Cluster: in the book's slot). Returns the events'
    results and the script's reply; an error the script raised is raised.
    """
    plan = tasks.apply_many_then(ns, items, (script, keys, args), full_task)
    results, reply = yield from plan
    if isinstance(reply, Exception):
        raise reply
    return results, reply


def apply_in_script(
    ns: Namespace,
    task_id: str,
    items: Sequence[tuple[EventInput | None, str | None]],
    script: BookScript,
    key: str,
    args: Sequence[str],
    *,
    name: str | None = None,
    group_id: str | None = None,
) -> MergedPlan[ScriptedEvents]:
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
    return tasks.apply_in_script(ns, task_id, items, (script, key, args), name, group_id)


def expire_many(
    ns: Namespace, task_ids: Iterable[str], *, full_task: bool = True
) -> MergedPlan[list[AsyncTransition | AsyncBookError]]:
    """Expire many tasks at their deadlines: one script call per thousand (each
    expiry is ``expire``'s, atomic on its own)."""
    results = yield from tasks.expire_many(ns, task_ids, full_task)
    return [r if isinstance(r, AsyncBookError) else r.transition() for r in results]


def resume(
    ns: Namespace, task_id: str, cursor_version: int, *, full_task: bool = True
) -> MergedPlan[ResumeResult]:
    """What changed after ``cursor_version``: caught-up, a delta, or a snapshot.

    With ``full_task=False`` a caught-up or delta answer carries the task without its
    history, so it costs O(events returned) however long the history is.
    """
    return tasks.resume(ns, task_id, cursor_version, full_task)


def deliver_result(
    ns: Namespace, task_id: str, idempotency_key: str, now_ms: int | float
) -> MergedPlan[DeliveryResult]:
    """Hand the result over once per idempotency key."""
    return tasks.deliver_result(ns, task_id, idempotency_key, now_ms)


def drain_notifications(ns: Namespace) -> MergedPlan[list[Notification]]:
    """Every pending notification, sorted by task id then time; empties the outbox."""
    return reads.drain(ns, groups=False)


def consume_notifications(
    ns: Namespace,
    group: str,
    consumer: str,
    count: int = 100,
    block_ms: int | None = None,
    min_idle_ms: int = 60_000,
) -> MergedPlan[list[tuple[str, Notification]]]:
    """Read notifications at least once: acknowledge each with ``ack`` when handled.

    Entries another consumer read but never acknowledged for ``min_idle_ms`` are
    claimed first; then new entries. The group is created on first use.
    """
    return reads.consume(ns, False, group, consumer, outbox.Reading(count, block_ms, min_idle_ms))


def ack(ns: Namespace, group: str, *entry_ids: str) -> MergedPlan[int]:
    """Acknowledge handled notifications; returns how many were pending."""
    return reads.ack(ns, False, group, entry_ids)


def drain_group_notifications(ns: Namespace) -> MergedPlan[list[GroupNotification]]:
    """Every pending group notification, in order; empties their stream."""
    return reads.drain(ns, groups=True)


def consume_group_notifications(
    ns: Namespace,
    group: str,
    consumer: str,
    count: int = 100,
    block_ms: int | None = None,
    min_idle_ms: int = 60_000,
) -> MergedPlan[list[tuple[str, GroupNotification]]]:
    """Group notifications, at least once: acknowledge with ``ack_group_notifications``."""
    return reads.consume(ns, True, group, consumer, outbox.Reading(count, block_ms, min_idle_ms))


def ack_group_notifications(ns: Namespace, group: str, *entry_ids: str) -> MergedPlan[int]:
    """Acknowledge handled group notifications; returns how many were pending."""
    return reads.ack(ns, True, group, entry_ids)


def overdue(ns: Namespace, now_ms: int | float, limit: int = 1000) -> MergedPlan[list[str]]:
    """Ids of live tasks whose deadline is at or before ``now_ms``, earliest first."""
    return reads.overdue(ns, now_ms, limit)


def overdue_count(ns: Namespace, now_ms: int | float) -> MergedPlan[int]:
    """How many live tasks have a deadline at or before ``now_ms`` (one ZCOUNT)."""
    return reads.overdue_count(ns, now_ms)


def record_sweep(ns: Namespace, at_ms: int | float) -> MergedPlan[None]:
    """Note that a sweep ran at ``at_ms`` (kept without expiry: one small key)."""
    return on(0, operations.record_sweep(ns.first, at_ms))


def last_sweep_ms(ns: Namespace) -> MergedPlan[int | None]:
    """When a sweep last ran, or None if none ever did."""
    return on(0, operations.last_sweep_ms(ns.first), writes=False)


def claim_sweep(ns: Namespace, owner: str, lease_ms: int) -> MergedPlan[bool]:
    """Take the namespace's sweep lease for ``lease_ms`` if nobody holds it, or renew it
    if ``owner`` does (``SET NX PX GET``): True if ``owner`` may sweep now. A holder
    that stops renewing (it died) is replaced once its lease lapses."""
    return on(0, operations.claim_sweep(ns.first, owner, lease_ms))


def list_tasks(
    ns: Namespace,
    state: str | None = None,
    limit: int = 50,
    after: str | None = None,
    *,
    full_task: bool = True,
) -> MergedPlan[TaskPage]:
    """Tasks, newest first, optionally in one state; ``after`` continues a page.

    With ``full_task=False`` the listed tasks come without their histories (the
    listing then reads no history at all).
    """
    return reads.list_tasks(ns, state, limit, after, full_task)


def heartbeat(ns: Namespace, task_ids: Iterable[str]) -> MergedPlan[int]:
    """Say that these tasks' running attempts are alive: one round trip for them all."""
    return tasks.heartbeat(ns, task_ids)


def end_stalled(
    ns: Namespace, now_ms: int | float | None = None, limit: int = 1000
) -> MergedPlan[list[CallbackResult | AsyncBookError]]:
    """Fail every running task whose heartbeat is overdue (by the server's clock).

    The script checks again, atomically, that the task is still overdue, so a
    heartbeat that arrives meanwhile wins; each fail carries a callback id naming the
    stall, so two sweeps fail a task once.
    """
    return tasks.end_stalled(ns, now_ms, limit)


def last_cursor(ns: Namespace, task_id: str) -> MergedPlan[str | None]:
    """The cursor of the last progress the task reported (its checkpoint), or None."""
    return reads.last_cursor(ns, task_id)


def seal_group(ns: Namespace, group_id: str, total: int) -> MergedPlan[GroupSummary]:
    """Declare that ``group_id`` has ``total`` members: once they have all ended, one
    group notification (at once if they already have)."""
    return tasks.seal_group(ns, group_id, total)


def group(ns: Namespace, group_id: str) -> MergedPlan[GroupSummary | None]:
    """The group's counts by state and its progress: one round trip, O(1)."""
    return groups.summary(ns, group_id)


def group_members(ns: Namespace, group_id: str, limit: int = 100) -> MergedPlan[list[AsyncTask]]:
    """The group's members in creation order (without histories), up to ``limit``."""
    return groups.members(ns, group_id, limit)


def now_ms(ns: Namespace) -> MergedPlan[int]:
    """The Redis server's clock (TIME): one clock for every worker, beat and client."""
    return reads.now_ms(ns)


def info(ns: Namespace, task_id: str) -> MergedPlan[TaskInfo | None]:
    """A task's info (Celery name, arguments, queue, worker, times, traceback), or
    None when the book does not hold the task."""
    return reads.info(ns, task_id)


def search(
    ns: Namespace, query: TaskQuery | None = None, /, **filters: Any
) -> MergedPlan[SearchPage]:
    """One page of tasks matching a ``TaskQuery`` (or its fields as keywords: name,
    state, worker, q, since_ms, until_ms, sort, limit, after), with totals per state."""
    return reads.search(ns, TaskQuery(**filters) if query is None else query)


def workers(ns: Namespace, within_ms: int = 86_400_000) -> MergedPlan[list[WorkerSummary]]:
    """Workers seen in the last ``within_ms``, most recently seen first."""
    return reads.workers(ns, within_ms)


def stats(
    ns: Namespace, name: str | None = None, window_ms: int = 3_600_000, now_ms: int | None = None
) -> MergedPlan[TaskStats]:
    """Per-minute starts, ends by state and runtime percentiles of one task name (None:
    every task) over the last ``window_ms`` (one minute to a day): one round trip."""
    return reads.stats(ns, name, window_ms, now_ms)


def task_names(ns: Namespace, within_ms: int | None = None) -> MergedPlan[list[str]]:
    """Task names the book has seen (created within ``within_ms``), sorted."""
    return reads.task_names(ns, within_ms)


def name_totals(ns: Namespace) -> MergedPlan[list[NameTotals]]:
    """Running totals per task name, for Prometheus counters and histograms."""
    return reads.name_totals(ns)


def gauges(
    ns: Namespace, now_ms: int, within_ms: int = GAUGE_WORKERS_WITHIN_MS
) -> MergedPlan[BookGauges]:
    """What ``/metrics`` reads beyond the counts: the notification streams, their
    consumer groups and the workers seen (``_gauges``), in one round trip."""
    return reads.gauges(ns, now_ms, within_ms)


def count_by_state(ns: Namespace) -> MergedPlan[dict[str, int]]:
    """How many tasks each state index holds (one pipelined round trip)."""
    return reads.count_by_state(ns)


def transition_counts(ns: Namespace) -> MergedPlan[dict[str, int]]:
    """How many times each reason was answered, by every client of this book."""
    return reads.transition_counts(ns)


def prune(ns: Namespace, limit: int = 1000) -> MergedPlan[int]:
    """Drop index entries of ended tasks whose records expired; returns how many.

    Looks at up to ``limit`` entries per index (each terminal state's, each task
    name's, each worker's and each sort index), in index order, resuming where the previous call
    stopped, so regular calls (the sweep makes one per pass) visit every entry in turn.
    """
    if ns.retention is None:
        return 0
    return (yield from reads.prune(ns, limit))


SURFACE = (
    "create",
    "create_many",
    "get",
    "apply",
    "cancel",
    "audit",
    "record_audit",
    "expire",
    "apply_many",
    "apply_many_then",
    "apply_in_script",
    "expire_many",
    "resume",
    "deliver_result",
    "drain_notifications",
    "consume_notifications",
    "ack",
    "drain_group_notifications",
    "consume_group_notifications",
    "ack_group_notifications",
    "overdue",
    "overdue_count",
    "record_sweep",
    "last_sweep_ms",
    "claim_sweep",
    "list_tasks",
    "heartbeat",
    "end_stalled",
    "last_cursor",
    "seal_group",
    "group",
    "group_members",
    "now_ms",
    "info",
    "search",
    "workers",
    "stats",
    "task_names",
    "name_totals",
    "gauges",
    "count_by_state",
    "transition_counts",
    "prune",
)
"""The calls both facades offer, each this module's function of the same name."""
