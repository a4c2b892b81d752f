"""The book's surface, written once: every call of ``RedisBook`` and ``AsyncRedisBook``
as a function of the namespace returning its namespace plan (``_merged``), with its
public signature and docstring. The facades are this table run by a driver (``sync``:
``Driver``, ``awaited``: ``AsyncDriver``); ``SURFACE`` names the calls both offer, and a
test holds each facade to it.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Awaitable, Callable
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, TypeVar, Unpack, overload

from .._book import CreateOptions, CreateSpec
from .._console import IndexLag, SearchPage, TaskQuery
from .._models import AsyncTask, GroupNotification, Notification
from . import _console as console
from . import _indexer as indexer
from . import _operations as operations
from . import _outbox as outbox
from . import _reads as reads
from . import _task_ops as tasks
from ._batch_ops import (
    apply_in_script,
    apply_many,
    apply_many_then,
    cancel_many,
    create_many,
    end_stalled,
    expire_many,
    heartbeat,
)
from ._book_driver import AsyncDriver, Driver
from ._console import task_names
from ._fleet import announce_worker, retire_worker, worker_records
from ._groups import group, group_members
from ._merged import MergedPlan, NamespaceCall, on
from ._namespace import Namespace
from ._output import append_output, output, wait_output
from ._reads import (
    audit,
    children,
    count_by_state,
    gauges,
    info,
    last_cursor,
    list_tasks,
    now_ms,
    overdue,
    overdue_count,
    transition_counts,
)
from ._slots import claim_run_in_slot, release_slot, take_slot
from ._stats import name_totals, stats, workers
from ._task_ops import (
    apply,
    cancel,
    claim_run,
    deliver_result,
    expire,
    record_audit,
    resume,
    seal_group,
)
from ._trace_reads import stored_traces

__all__ = [
    "SURFACE",
    "awaited",
    "sync",
    "create",
    "create_many",
    "get",
    "apply",
    "cancel",
    "cancel_many",
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
    "claim_run",
    "last_cursor",
    "seal_group",
    "group",
    "group_members",
    "now_ms",
    "info",
    "children",
    "search",
    "workers",
    "announce_worker",
    "retire_worker",
    "worker_records",
    "stats",
    "task_names",
    "name_totals",
    "gauges",
    "count_by_state",
    "transition_counts",
    "prune",
    "catch_up_index",
    "append_output",
    "output",
    "wait_output",
    "take_slot",
    "claim_run_in_slot",
    "release_slot",
    "stored_traces",
]

SURFACE = tuple(__all__[3:])
"""The calls both facades offer, each this module's function of the same name."""

_P = ParamSpec("_P")
_T = TypeVar("_T")
_D = TypeVar("_D", Driver, AsyncDriver)
_Plan = Callable[Concatenate[Namespace, _P], NamespaceCall[_T]]
"""A call of the table: a function of the namespace returning its namespace plan."""


class _Book(Protocol[_D]):
    """A facade: its namespace, and the driver that runs (``Driver``) or awaits
    (``AsyncDriver``) its plans."""

    ns: Namespace
    driver: _D


def sync(plan: _Plan[_P, _T]) -> Callable[Concatenate[_Book[Driver], _P], _T]:
    """A ``RedisBook`` method: ``plan`` of the book's namespace, run by its driver."""

    @functools.wraps(plan)
    def method(book: _Book[Driver], /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        return book.driver.run(plan(book.ns, *args, **kwargs))

    return method


def awaited(plan: _Plan[_P, _T]) -> Callable[Concatenate[_Book[AsyncDriver], _P], Awaitable[_T]]:
    """An ``AsyncRedisBook`` method: ``plan`` of the book's namespace, awaited on its
    driver."""

    @functools.wraps(plan)
    async def method(book: _Book[AsyncDriver], /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        return await book.driver.run(plan(book.ns, *args, **kwargs))

    return method


class Method(Generic[_P, _T]):
    """A call of the table on either facade (``BookBase`` lists them once): ``RedisBook``
    runs it (``sync``), ``AsyncRedisBook`` awaits it; mypy checks each facade's."""

    def __init__(self, plan: _Plan[_P, _T]) -> None:
        self.sync = sync(plan)
        self.awaited = awaited(plan)

    @overload
    def __get__(self, book: _Book[Driver], owner: Any) -> Callable[_P, _T]: ...
    @overload
    def __get__(self, book: _Book[AsyncDriver], owner: Any) -> Callable[_P, Awaitable[_T]]: ...
    def __get__(self, book: object, owner: Any) -> Any:
        method = self.awaited if owner.asyncio else self.sync
        return method if book is None else types.MethodType(method, book)


def create(ns: Namespace, **options: Unpack[CreateOptions]) -> MergedPlan[AsyncTask]:
    """Store a new queued task; an existing id is ``conflict`` unless ``exist_ok``.

    With ``heartbeat_timeout_ms`` a running attempt silent for that long is ended by
    ``end_stalled`` (retryable when ``retry_on_stall``). With ``group_id`` the task is
    a member of that group (``group``, ``seal_group``). ``info`` is kept for the
    console (``info``, ``search``, ``stats``); the task itself does not show it.
    """
    return tasks.create(ns, CreateSpec(**options))


def get(ns: Namespace, id: str) -> NamespaceCall[AsyncTask | None]:
    """The stored task with its history, or None."""
    return reads.get(ns, id)


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


def search(
    ns: Namespace, query: TaskQuery | None = None, /, **filters: Any
) -> MergedPlan[SearchPage]:
    """One page of tasks matching a ``TaskQuery`` (or its fields as keywords: name,
    state, worker, q, since_ms, until_ms, sort, limit, after), with totals per state."""
    return console.search(ns, TaskQuery(**filters) if query is None else query)


def prune(ns: Namespace, limit: int = 1000) -> MergedPlan[int]:
    """Drop index entries of ended tasks whose records expired; returns how many.

    Looks at up to ``limit`` entries per index (each terminal state's, each task
    name's, each worker's and each sort index), in index order, resuming where the previous call
    stopped, so regular calls (the sweep makes one per pass) visit every entry in turn.
    """
    if ns.retention is None:
        return 0
    return (yield from reads.prune(ns, limit))


def catch_up_index(ns: Namespace, batches: int = indexer.READ_BATCHES) -> MergedPlan[IndexLag]:
    """Apply the waiting changes to the state, name and sort indexes, up to ``batches``
    batches of ``indexer.BATCH`` per shard (the worker's service thread calls this; every
    read of the indexes does it first); returns how far behind they stayed (with
    ``batches=0``: how far behind they are)."""
    return (yield from indexer.caught_up(ns.shards, batches))
