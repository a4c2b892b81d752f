"""A book's reads and namespace-wide calls, written once as namespace plans (``_merged``):
a task's read in its shard; a listing, count, search or notification read over every
shard and merged (the console's in ``_console`` and ``_stats``), S = 1 being the merge
of one.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Sequence
from typing import Any

from .._audit import AuditEntry
from .._book import sort_notifications
from .._checks import (
    require_limit,
    require_non_negative,
    require_page_cursor,
    require_state,
    require_string,
)
from .._console import TaskInfo
from .._gauges import GAUGE_WORKERS_LIMIT, GAUGE_WORKERS_WITHIN_MS, BookGauges, GroupBacklog
from .._models import STATE_NAMES, AsyncTask, TaskPage
from ..errors import invalid
from . import _audit as audits
from . import _batches as batches
from . import _console as console
from . import _operations as operations
from . import _outbox as outbox
from ._args import utf8
from ._gauges import gauges as shard_gauges
from ._groups import tasks_in_order
from ._indexer import caught_up
from ._merged import MergedPlan, OneShard, OnShards, asked, every, on
from ._namespace import Namespace
from ._plan import SETTLE, Pipeline, Plan, command, server_time
from ._replies import text_of
from ._shard import Shard

__all__ = [
    "ack",
    "audit",
    "children",
    "consume",
    "count_by_state",
    "drain",
    "get",
    "info",
    "last_cursor",
    "list_tasks",
    "now_ms",
    "overdue",
    "overdue_count",
    "prune",
    "transition_counts",
]

ENTRY_SEPARATOR = "/"
"""A stream entry id of a namespace of several shards: ``<shard>/<entry id>``."""


# -- a task's reads -----------------------------------------------------------------


def get(ns: Namespace, task_id: str) -> OneShard[AsyncTask | None]:
    """The stored task with its history, or None."""
    index = ns.index_of(task_id)
    return OneShard(index, operations.get(ns.shards[index], task_id))


def info(ns: Namespace, task_id: str) -> OneShard[TaskInfo | None]:
    """A task's info (Celery name, arguments, queue, worker, times, traceback), or None."""
    index = ns.index_of(task_id)
    return OneShard(index, console.info(ns.shards[index], task_id))


def children(ns: Namespace, task_id: str, limit: int = 1000) -> MergedPlan[list[str]]:
    """The tasks ``task_id`` published (a chain's next link, a spawned task, a chord's
    callback), from every shard (a child is kept on its own), oldest first, at most
    ``limit``; a task's ``info`` lists those of its own shard only."""
    task_id = utf8(require_string(task_id, "taskId"), "taskId")
    count = require_limit(limit, maximum=10_000)
    pages = yield every(ns.shards, lambda shard: _children(shard, task_id, count))
    rows = sorted((float(score), text_of(raw)) for page in pages for raw, score in page)
    return [child for _score, child in rows[:count]]


def _children(shard: Shard, task_id: str, count: int) -> Plan[list[Any]]:
    yield SETTLE
    rows: list[Any] = yield command(
        "zrange", shard.keys.children(task_id), 0, count - 1, withscores=True
    )
    return rows


def last_cursor(ns: Namespace, task_id: str) -> OneShard[str | None]:
    """The cursor of the last progress the task reported (its checkpoint), or None."""
    index = ns.index_of(task_id)
    return OneShard(index, operations.last_cursor(ns.shards[index], task_id))


def audit(
    ns: Namespace,
    task_id: str | None = None,
    *,
    since_ms: int | float | None = None,
    limit: int = 100,
) -> MergedPlan[list[AuditEntry]]:
    """Audit entries, newest first: the task's, or (no ``task_id``) the namespace's."""
    if task_id is not None:
        index = ns.index_of(task_id)
        plan = audits.read(ns.shards[index], task_id, since_ms, limit)
        return (yield from on(index, plan, writes=False))
    logs = yield every(ns.shards, lambda shard: audits.read(shard, None, since_ms, limit))
    return list(heapq.merge(*logs, key=lambda entry: -entry.at_ms))[:limit]


# -- listings and counts ------------------------------------------------------------


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
    # Every shard's page merged by creation order (unique across shards). Each shard is
    # asked first for a few rows per state (twice its share of the page, and 2: one shard,
    # the page and one); a shard is asked again for a whole page only when a list of it
    # was cut above the page's last row (its unread rows could belong on the page). So a
    # merge reads about twice the page's rows per state, not S pages.
    wanted = require_state(state)
    count = require_limit(limit)
    cursor = require_page_cursor(after)
    states = STATE_NAMES if wanted is None else (wanted,)
    top = "+inf" if cursor is None else f"({cursor}"
    first = min(count + 1, 2 * ns.share(count + 1) + 2)
    yield from caught_up(ns.shards)
    pages: list[_Rows] = yield every(
        ns.shards, lambda shard: _newest_rows(shard, states, top, first)
    )
    if first <= count:
        scores = sorted((score for rows, _ in pages for _, score in rows), reverse=True)
        last = scores[count] if len(scores) > count else float("-inf")
        again = tuple(i for i, (_, bound) in enumerate(pages) if bound is not None and bound > last)
        if again:
            full = yield OnShards(
                tuple(_newest_rows(ns.shards[i], states, top, count + 1) for i in again), again
            )
            for index, rows in zip(again, full, strict=True):
                pages[index] = rows
    merged = sorted(
        ((score, index, raw_id) for index, page in enumerate(pages) for raw_id, score in page[0]),
        key=lambda row: -row[0],
    )
    more = len(merged) > count
    merged = merged[:count]
    if not merged:
        return TaskPage(tasks=())
    tasks = yield from tasks_in_order(ns.shards, merged, full_task)
    return TaskPage(tasks=tasks, next_after=str(int(merged[-1][0])) if more else None)


_Rows = tuple[list[tuple[Any, float]], float | None]
"""One shard's rows of a page (id, creation order), and the highest creation order its
unread rows may have (None: it has none unread)."""


def _newest_rows(shard: Shard, states: Sequence[str], top: str, per: int) -> Plan[_Rows]:
    """Up to ``per`` rows of each state's index below ``top``, newest first."""
    yield SETTLE
    pages = yield Pipeline(
        [
            command(
                "zrevrangebyscore",
                shard.keys.state_index(state),
                top,
                "-inf",
                start=0,
                num=per,
                withscores=True,
            )
            for state in states
        ]
    )
    # A list cut at ``per`` rows may hold more below its last row.
    cut = [rows[-1][1] for rows in pages if len(rows) >= per]
    rows = sorted((row for rows in pages for row in rows), key=lambda row: -row[1])
    return rows, max(cut) if cut else None


def overdue(ns: Namespace, now_ms: int | float, limit: int = 1000) -> MergedPlan[list[str]]:
    """Ids of live tasks whose deadline is at or before ``now_ms``, earliest first."""
    now = require_non_negative(now_ms, "nowMs")
    count = require_limit(limit, maximum=1_000_000)
    if ns.count == 1:  # the ids alone: their deadlines (WITHSCORES) would triple its cost
        return (yield from on(0, operations.overdue(ns.first, now, count), writes=False))
    rows = yield every(ns.shards, lambda shard: operations.overdue(shard, now, count, True))
    merged = heapq.merge(*rows, key=lambda row: (row[1], text_of(row[0])))
    return [text_of(raw) for raw, _ in list(merged)[:count]]


def overdue_count(ns: Namespace, now_ms: int | float) -> MergedPlan[int]:
    """How many live tasks have a deadline at or before ``now_ms`` (one ZCOUNT a shard)."""
    now = require_non_negative(now_ms, "nowMs")
    found = yield every(
        ns.shards, lambda shard: asked(command("zcount", shard.keys.deadlines, "-inf", now))
    )
    return sum(int(n) for n in found)


def count_by_state(ns: Namespace) -> MergedPlan[dict[str, int]]:
    """How many tasks each state index holds (once caught up: ``_indexer``)."""
    yield from caught_up(ns.shards)
    found = yield every(
        ns.shards,
        lambda shard: asked(Pipeline([command("zcard", key) for key in shard.keys.state_indexes])),
    )
    return {state: sum(int(each[at]) for each in found) for at, state in enumerate(STATE_NAMES)}


def transition_counts(ns: Namespace) -> MergedPlan[dict[str, int]]:
    """How many times each reason was answered, by every client of this book."""
    found = yield every(ns.shards, lambda shard: asked(command("hgetall", shard.keys.counters)))
    total = Counter[str]()
    for counts in found:
        total.update({text_of(raw): int(n) for raw, n in counts.items()})
    return dict(total)


# -- the console (its other reads: ``_console``, ``_stats``) ------------------------


def gauges(
    ns: Namespace, now_ms: int, within_ms: int = GAUGE_WORKERS_WITHIN_MS
) -> MergedPlan[BookGauges]:
    """What ``/metrics`` reads beyond the counts: the notification streams, their
    consumer groups and the workers seen (``_gauges``), in one round trip."""
    # Every shard's: stream lengths summed; each consumer group's pending and lag summed
    # (lag unknown when one shard's is); the workers seen as ``workers`` merges them.
    yield from caught_up(ns.shards)  # the workers seen
    found = yield every(ns.shards, lambda shard: shard_gauges(shard, now_ms, within_ms))
    lengths = Counter[str]()
    for each in found:
        lengths.update(each.stream_lengths)
    # A group reads every shard's stream: where it was not created yet (it is, on each
    # shard, at its first read there) every entry is still to be delivered to it.
    names = dict.fromkeys((group.stream, group.group) for each in found for group in each.groups)
    groups = []
    for stream, name in names:
        pending = 0
        lag: int | None = 0
        for each in found:
            here = next((g for g in each.groups if (g.stream, g.group) == (stream, name)), None)
            pending += 0 if here is None else here.pending
            shard_lag = each.stream_lengths.get(stream, 0) if here is None else here.lag
            lag = None if lag is None or shard_lag is None else lag + shard_lag
        groups.append(GroupBacklog(stream, name, pending, lag, lengths[stream]))
    seen: dict[str, float] = {}
    for worker, at in (row for each in found for row in each.workers_seen):
        seen[worker] = max(at, seen.get(worker, at))
    ordered = sorted(seen.items(), key=lambda row: (row[1], row[0]), reverse=True)
    return BookGauges(dict(lengths), tuple(groups), tuple(ordered[:GAUGE_WORKERS_LIMIT]))


# -- the server, the sweep ----------------------------------------------------------


def now_ms(ns: Namespace) -> MergedPlan[int]:
    """The Redis server's clock (TIME): one clock for every worker, beat and client."""
    return (yield from on(0, server_time(), writes=False))


def prune(ns: Namespace, limit: int) -> MergedPlan[int]:
    """Each shard's prune, ``limit`` / S entries per index of each (the shards at
    once): a pass costs what it costs on one shard."""
    count = require_limit(limit, maximum=1_000_000)
    share = ns.share(count)
    return sum((yield every(ns.shards, lambda shard: batches.prune(shard, share), writes=True)))


# -- notifications ------------------------------------------------------------------


def drain(ns: Namespace, groups: bool) -> MergedPlan[list[Any]]:
    """Every pending notification (``groups``: group notifications), emptying the
    streams: task notifications sorted by task id then time, group ones in order."""
    found = yield every(ns.shards, lambda shard: outbox.drain(shard, groups), writes=True)
    notes = [note for each in found for note in each]
    return notes if groups else sort_notifications(notes)


def consume(
    ns: Namespace, groups: bool, group: str, consumer: str, reading: outbox.Reading
) -> MergedPlan[list[tuple[str, Any]]]:
    """Notifications read through a consumer group, at least once. With several shards,
    each shard's stream is read (up to ``count`` in all), entry ids ``<shard>/<id>``,
    and a read blocks only when no shard had an entry, on each in turn for a slice."""

    def read(index: int, asked: outbox.Reading) -> MergedPlan[list[tuple[str, Any]]]:
        plan = outbox.consume(ns.shards[index], groups, group, consumer, asked)
        found: list[tuple[str, Any]] = yield from on(index, plan)
        return [(f"{index}{ENTRY_SEPARATOR}{entry_id}", note) for entry_id, note in found]

    if ns.count == 1:
        return (yield from on(0, outbox.consume(ns.first, groups, group, consumer, reading)))
    limit = require_limit(reading.count, "count")
    out: list[tuple[str, Any]] = []
    for index in range(ns.count):
        if len(out) >= limit:
            break
        out += yield from read(index, reading._replace(count=limit - len(out), block_ms=None))
    if out or reading.block_ms is None:
        return out
    share = max(1, int(reading.block_ms) // ns.count)
    for index in range(ns.count):
        found = yield from read(index, reading._replace(count=limit, block_ms=share))
        if found:
            return found
    return out


def ack(ns: Namespace, groups: bool, group: str, entry_ids: tuple[str, ...]) -> MergedPlan[int]:
    """Acknowledge handled entries; how many were pending."""
    if ns.count == 1:
        return (yield from on(0, outbox.ack(ns.first, groups, group, entry_ids)))
    by_shard: dict[int, list[str]] = {}
    for entry in entry_ids:
        index, separator, entry_id = str(entry).partition(ENTRY_SEPARATOR)
        if not separator or not index.isdigit() or int(index) >= ns.count:
            raise invalid(f"entry id {entry!r} is not <shard>/<id>", field="entryIds")
        by_shard.setdefault(int(index), []).append(entry_id)
    indexes = tuple(by_shard)
    plans = tuple(outbox.ack(ns.shards[i], groups, group, tuple(by_shard[i])) for i in indexes)
    return sum((yield OnShards(plans, indexes, True))) if plans else 0
