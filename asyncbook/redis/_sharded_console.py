"""The operator console's reads of a namespace of several shards (``RedisBook`` and
``AsyncRedisBook`` with ``shards`` > 1): a task's in its shard; the rest read on every
shard and merged into the answer one shard holding the same tasks gives.

Each merged read is a namespace plan (``_merged``), chosen by ``_reads``: the sync driver
runs its shards' plans together (one pipeline per node at each step), the asyncio one
with ``asyncio.gather``.

A search page is each shard's page of the same query merged by the query's order: every
row carries its position (the cursor of a page ending with it, search.lua), and the
merged page ends at the first position some shard cannot see past (its ``next_after``:
its page was full, or its walk ran out of budget), so the merged cursor, sent to every
shard, never skips nor repeats a task. A merged page reads S pages of up to ``limit``
rows each. Counts (stats, workers, names, totals, gauges) are summed; runtime
percentiles are computed again from the summed histogram buckets.
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar, cast

from .._audit import AuditEntry
from .._console import (
    MinuteStats,
    NameTotals,
    SearchPage,
    SortOrder,
    TaskQuery,
    TaskStats,
    WorkerSummary,
    matched_counts,
    percentile_ms,
)
from .._gauges import GAUGE_WORKERS_LIMIT, BookGauges, GroupBacklog
from .._models import GROUP_END_STATES, STATE_NAMES
from . import _audit as audits
from . import _console as console
from . import _stats as stat_reads
from ._gauges import gauges as gauges_plan
from ._merged import MergedPlan, OnShards
from ._plan import Plan, ScriptCall, server_time
from ._replies import text_of
from ._script_args import SearchArgs
from ._scripts import ScriptStatus
from ._shard import Shard

__all__ = [
    "audit",
    "gauges",
    "merge_pages",
    "name_totals",
    "search",
    "stats",
    "task_names",
    "workers",
]

_T = TypeVar("_T")


def _every(shards: Sequence[Shard], make: Callable[[Shard], Plan[_T]]) -> OnShards:
    return OnShards(tuple(make(shard) for shard in shards))


def audit(
    shards: Sequence[Shard], since_ms: int | float | None, limit: int
) -> MergedPlan[list[AuditEntry]]:
    """Every shard's audit log merged, newest first (a task's is its shard's)."""
    logs = yield _every(shards, lambda each: audits.read(each, None, since_ms, limit))
    return list(heapq.merge(*logs, key=lambda entry: -entry.at_ms))[:limit]


# -- search -------------------------------------------------------------------------


def search(shards: Sequence[Shard], query: TaskQuery) -> MergedPlan[SearchPage]:
    """``_console.search`` over every shard: each page the search reads is every shard's
    page merged (``merge_pages``); a name sort reads the names of every shard."""
    checked = query.checked()

    def names() -> Plan[list[str]]:
        return cast(Plan[list[str]], task_names(shards, None))

    def page_of(asked: TaskQuery, unnamed: bool) -> Plan[SearchPage]:
        return cast(Plan[SearchPage], _merged_page(shards, asked, unnamed))

    return (yield from cast(MergedPlan[SearchPage], console.search_with(checked, names, page_of)))


def _merged_page(
    shards: Sequence[Shard], query: TaskQuery, unnamed: bool
) -> MergedPlan[SearchPage]:
    """Each shard's page of ``query``: first a short one; if the merge of the short pages
    is not a full page, the shards whose short page was cut by its length are read again
    in full. A short page is, in creation order with no filter but a state or a name
    (``_by_positions``), one row past the shard's share of the merged page, from the
    first entries of its walk; else twice the shard's even share of the page, and 2."""
    even = min(query.limit, 2 * -(-query.limit // len(shards)) + 2)
    if _by_positions(query, unnamed):
        firsts: list[_Entries] = yield _every(
            shards, lambda each: _first_entries(each, query, even)
        )
        limits, ahead = _shares(query, firsts, even)
    else:
        limits, ahead = [even] * len(shards), [[] for _ in shards]
    found: list[console.PageFound] = yield OnShards(
        tuple(
            console.search_page_at(each, query._replace(limit=limit), unnamed, ids)
            for each, limit, ids in zip(shards, limits, ahead, strict=True)
        )
    )
    cut = tuple(
        index
        for index, (each, limit) in enumerate(zip(found, limits, strict=True))
        if limit < query.limit and each.page.next_after is not None and len(each.rows) >= limit
    )
    if cut and len(_kept(query, found)[0]) < query.limit:
        again = yield OnShards(
            tuple(console.search_page_at(shards[i], query, unnamed) for i in cut), cut
        )
        for index, each in zip(cut, again, strict=True):
            found[index] = each
    return merge_pages(query, found)


def _by_positions(query: TaskQuery, unnamed: bool) -> bool:
    """Whether a shard's page walks its state indexes (of all tasks or of a name) in
    creation order taking every entry (its record kept): where the page's rows fall
    follows from the indexes' first entries."""
    plain = query.q is None and query.worker is None and not unnamed
    return plain and query.order.field == "created" and query.since_ms is query.until_ms is None


_Entries = list[tuple[int, str]]
"""A shard's first entries of its page's walk: (creation order, id)."""


def _first_entries(shard: Shard, query: TaskQuery, count: int) -> Plan[_Entries]:
    """The first ``count`` entries of a shard's walk for ``query`` (after its cursor, in
    its order, over the indexes it walks); one script call, no rows read."""
    k = shard.keys
    indexes = k.state_indexes if query.name is None else k.name_indexes(query.name)
    args = SearchArgs(
        "[]",
        "desc" if query.order.descending else "asc",
        count - 1,
        query.after or "",
        query.state or "",
        query.name or "",
        "",
        None,
        None,
        count,
        "card",
        peek=True,
    )
    reply = yield ScriptCall("search", indexes, args.argv())
    assert text_of(reply[0]) == ScriptStatus.AT
    return [(int(reply[i + 1]), text_of(reply[i])) for i in range(1, len(reply), 2)]


def _shares(
    query: TaskQuery, firsts: Sequence[_Entries], count: int
) -> tuple[list[int], list[list[str]]]:
    """Each shard's page length, and the ids its walk is expected to meet, from the first
    ``count`` entries of each shard's walk: one row past its share of the merged first
    ``limit + 1`` entries, so that every shard's page ends past the merged page. A shard
    whose ``count`` entries all fall inside those may hold more of them: it reads a whole
    page."""
    sign = -1 if query.order.descending else 1
    entries = sorted(
        (sign * order, shard, task_id)
        for shard, first in enumerate(firsts)
        for order, task_id in first
    )
    top = entries[: query.limit + 1]
    taken = [0] * len(firsts)
    for _order, shard, _id in top:
        taken[shard] += 1
    limits = [min(query.limit, share + 1) for share in taken]
    for shard, first in enumerate(firsts):
        if len(first) >= count and taken[shard] >= count:
            limits[shard] = query.limit
    ahead: list[list[str]] = [[] for _ in firsts]
    for _order, shard, task_id in entries:
        if len(ahead[shard]) <= limits[shard]:
            ahead[shard].append(task_id)
    return limits, ahead


@functools.total_ordering
class _Descending:
    """A value ordered backwards (a descending page's ties: ids from the last byte up)."""

    __slots__ = ("value",)

    def __init__(self, value: bytes) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Descending) and self.value == other.value

    def __lt__(self, other: _Descending) -> bool:
        return other.value < self.value

    def __hash__(self) -> int:
        return hash(self.value)


def _position_key(order: SortOrder) -> Callable[[str], tuple[Any, ...]]:
    """Where a position (a cursor search.lua gives) falls in the page's order, as a key
    that sorts ascending: by creation a creation order (exact: parsed as an integer);
    by a field ``<value>:<id>`` by value, ties by id as Redis orders a sorted set's
    members (bytes), then ``~<creation order>`` (the tasks without the value) after."""
    sign = -1 if order.descending else 1
    if order.field == "created":
        return lambda position: (sign * int(position),)

    def key(position: str) -> tuple[Any, ...]:
        if position.startswith("~"):
            return (1, sign * int(position[1:]))
        value, _, task_id = position.partition(":")
        raw = task_id.encode("utf-8", "surrogatepass")
        return (0, sign * float(value), _Descending(raw) if order.descending else raw)

    return key


_Kept = tuple[list[tuple[tuple[Any, ...], str, Any]], str | None, bool]
"""The rows a merged page keeps (key, position, reply), its cursor, and whether its
scan was complete."""


def merge_pages(query: TaskQuery, found: Sequence[console.PageFound]) -> SearchPage:
    """One page from each shard's page of ``query`` (a search not sorted by name): the
    first ``query.limit`` rows in the query's order, up to the first position some
    shard's page ended at (past it that shard was not read); only the rows kept are
    read (``search_row``)."""
    rows, next_after, complete = _kept(query, found)
    pages = [each.page for each in found]
    taken = tuple(console.search_row(reply) for _key, _position, reply in rows)
    return SearchPage(
        tasks=taken,
        totals={state: sum(page.totals.get(state, 0) for page in pages) for state in STATE_NAMES},
        totals_exact=all(page.totals_exact for page in pages),
        next_after=next_after,
        scanned=sum(page.scanned for page in pages),
        scan_complete=complete,
        matched=None if query.q is None else matched_counts(taken),
    )


def _kept(query: TaskQuery, found: Sequence[console.PageFound]) -> _Kept:
    """What ``merge_pages`` keeps of the shards' pages, none of it read yet."""
    key = _position_key(query.order)
    bound: tuple[tuple[Any, ...], str, bool] | None = None
    complete = True
    pages = [each.page for each in found]
    for page in pages:
        if page.next_after is None:
            complete = complete and page.scan_complete
            continue
        at = key(page.next_after)
        if bound is None or at < bound[0]:
            bound = (at, page.next_after, page.scan_complete)
    rows: list[tuple[tuple[Any, ...], str, Any]] = list(
        heapq.merge(
            *([(key(at), at, reply) for at, reply in each.rows] for each in found),
            key=lambda entry: entry[0],
        )
    )
    if bound is not None:
        rows = [row for row in rows if row[0] <= bound[0]]
    if len(rows) > query.limit:
        rows = rows[: query.limit]
        next_after: str | None = rows[-1][1]
    elif bound is not None:
        next_after, complete = bound[1], complete and bound[2]
    else:
        next_after = None
    return rows, next_after, complete


# -- workers, stats, names, totals, gauges ------------------------------------------


def workers(shards: Sequence[Shard], within_ms: int) -> MergedPlan[list[WorkerSummary]]:
    """Each worker's summaries of every shard as one: counts summed, last seen the
    latest, running tasks together; most recently seen first (ties by name, last
    first, as one shard's sorted set answers)."""
    found = yield _every(shards, lambda each: console.workers(each, within_ms))
    merged: dict[str, WorkerSummary] = {}
    for summary in (summary for summaries in found for summary in summaries):
        known = merged.get(summary.name)
        if known is None:
            merged[summary.name] = summary
            continue
        merged[summary.name] = WorkerSummary(
            name=summary.name,
            last_seen_ms=max(known.last_seen_ms, summary.last_seen_ms),
            running=tuple(sorted({*known.running, *summary.running})),
            started=known.started + summary.started,
            succeeded=known.succeeded + summary.succeeded,
            failed=known.failed + summary.failed,
        )
    ordered = sorted(merged.values(), key=lambda w: (w.last_seen_ms, w.name), reverse=True)
    return ordered[: console.WORKERS_LISTED]


def _summed(rows: Iterable[Sequence[int]]) -> tuple[int, ...]:
    return tuple(sum(column) for column in zip(*rows, strict=True))


def _minute(minutes: Sequence[MinuteStats]) -> MinuteStats:
    buckets = _summed(minute.runtime_buckets for minute in minutes)
    counts = {
        field: sum(getattr(minute, field) for minute in minutes)
        for field in ("started", *GROUP_END_STATES)
    }
    return MinuteStats.model_construct(
        minute_ms=minutes[0].minute_ms,
        runtime_buckets=buckets,
        p50_ms=percentile_ms(buckets, 0.5),
        p95_ms=percentile_ms(buckets, 0.95),
        p99_ms=percentile_ms(buckets, 0.99),
        **counts,
    )


def stats(
    shards: Sequence[Shard], name: str | None, window_ms: int, now_ms: int | None
) -> MergedPlan[TaskStats]:
    """Every shard's stats over the same window (one clock: the server's, read once
    when ``now_ms`` is not given), summed minute by minute; percentiles from the summed
    runtime buckets (a percentile of a merged histogram, never an average of them)."""
    if now_ms is None:
        (now_ms,) = yield OnShards((server_time(),), (0,))
    at = now_ms
    found = yield _every(shards, lambda each: stat_reads.stats_counts(each, name, window_ms, at))
    return stat_reads.stats_of(name, window_ms, stat_reads.add_counts(found))


def task_names(shards: Sequence[Shard], within_ms: int | None) -> MergedPlan[list[str]]:
    """Every shard's names, once each, sorted."""
    found = yield _every(shards, lambda each: console.task_names(each, within_ms))
    return sorted({name for names in found for name in names})


def name_totals(shards: Sequence[Shard]) -> MergedPlan[list[NameTotals]]:
    """Every shard's running totals, summed per name."""
    found = yield _every(shards, stat_reads.name_totals)
    by_name: dict[str, list[NameTotals]] = {}
    for totals in (totals for each in found for totals in each):
        by_name.setdefault(totals.name, []).append(totals)
    return [
        NameTotals(
            name=name,
            runtime_buckets=_summed(each.runtime_buckets for each in parts),
            runtime_sum_ms=sum(each.runtime_sum_ms for each in parts),
            **{
                field: sum(getattr(each, field) for each in parts)
                for field in ("started", *GROUP_END_STATES)
            },
        )
        for name, parts in sorted(by_name.items())
    ]


def gauges(shards: Sequence[Shard], now_ms: int, within_ms: int) -> MergedPlan[BookGauges]:
    """Every shard's gauges: stream lengths summed; each consumer group's pending and
    lag summed over every shard (lag unknown when one shard's is); workers as
    ``workers`` merges them, at most ``GAUGE_WORKERS_LIMIT``."""
    found = yield _every(shards, lambda each: gauges_plan(each, now_ms, within_ms))
    lengths: dict[str, int] = {}
    for each in found:
        for stream, length in each.stream_lengths.items():
            lengths[stream] = lengths.get(stream, 0) + length
    # A group reads every shard's stream: where it was not created yet (it is, on each
    # shard, at its first read there) every entry is still to be delivered to it.
    names = dict.fromkeys((group.stream, group.group) for each in found for group in each.groups)
    groups = []
    for stream, name in names:
        pending, length = 0, 0
        lag: int | None = 0
        for each in found:
            here = next((g for g in each.groups if (g.stream, g.group) == (stream, name)), None)
            shard_length = each.stream_lengths.get(stream, 0)
            length += shard_length
            pending += 0 if here is None else here.pending
            shard_lag = shard_length if here is None else here.lag
            lag = None if lag is None or shard_lag is None else lag + shard_lag
        groups.append(GroupBacklog(stream, name, pending, lag, length))
    seen: dict[str, float] = {}
    for worker, at in (row for each in found for row in each.workers_seen):
        seen[worker] = max(at, seen.get(worker, at))
    ordered = sorted(seen.items(), key=lambda row: (row[1], row[0]), reverse=True)
    return BookGauges(lengths, tuple(groups), tuple(ordered[:GAUGE_WORKERS_LIMIT]))
