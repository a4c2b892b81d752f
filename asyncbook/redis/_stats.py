"""The console's counts of a Redis book: per-minute stats over a window and running
totals per task name, as the task scripts count them (lua/_info.lua's count_minute), and
the workers seen with their counts and running tasks.

Each read is a namespace plan (``_merged``): every shard's counts are read together and
added up, and the answer is built once from the sums (a percentile of a merged
histogram, never an average of them); S = 1 is the sum of one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from .._console import (
    RUNTIME_BUCKETS_MS,
    STATS_MINUTE_MS,
    STATS_WINDOW_MS,
    MinuteStats,
    NameTotals,
    TaskStats,
    WorkerSummary,
    percentile_ms,
)
from .._models import GROUP_END_STATES
from ..errors import invalid
from ._console import number_of, text_or_none, until_given
from ._merged import MergedPlan, every, on
from ._plan import Plan, ScriptCall, command, server_time
from ._replies import text_of
from ._script_args import StatsArgs, WorkersArgs

if TYPE_CHECKING:
    from ._namespace import Namespace
    from ._shard import Shard

__all__ = ["name_totals", "stats", "workers"]

_HOUR_MS = 3_600_000
_BUCKETS = len(RUNTIME_BUCKETS_MS) + 1
WORKERS_LISTED = 500
RUNNING_LOOKED_AT = 10_000


_Counted = tuple[dict[str, int], list[int]]
"""Counts by code (S, succeeded, ...) and runtimes by bucket, of a minute or a name."""


def _code_and_bucket(field: str) -> tuple[str, int]:
    """What one stats field counts (_info.lua's count_minute): ``<code>`` a code (bucket
    -1), ``<code>:<i>`` a code and a runtime in bucket i. ``b<i>``, a runtime alone (code
    ''), is a field of the layout before one write per event: read as it was."""
    code, _, bucket = field.partition(":")
    if bucket:
        return code, int(bucket)
    if code[:1] == "b":
        return "", int(code[1:])
    return code, -1


def _count(counted: _Counted, code: str, bucket: int, count: int) -> None:
    if bucket >= 0:
        counted[1][bucket] += count
    if code:
        codes = counted[0]
        codes[code] = codes.get(code, 0) + count


_FAILED_UNIT = 1 << 31
"""A failed run's share of a ``<minute>:r<i>`` count (STATS_FAILED_UNIT in _info.lua)."""

_CODES = ("S", *GROUP_END_STATES)
"""The codes a minute's answer reads, in the order of a minute's counts (``_Minute``)."""
_COLUMN = {code: column for column, code in enumerate(_CODES)}
_STARTED, _SUCCEEDED, _FAILED = _COLUMN["S"], _COLUMN["succeeded"], _COLUMN["failed"]
_EXPIRED, _CANCELLED = _COLUMN["expired"], _COLUMN["cancelled"]
_WIDTH = len(_CODES) + _BUCKETS

_Minute = list[int]
"""A minute's counts: one per code of ``_CODES``, then one per runtime bucket."""
_Field = tuple[int, int, int]
"""What a stats field adds to: minute of the hour, the column of its code (-1 none; -2
the ends with a runtime: ``<minute>:r<i>``, succeeded and failed in one number) and the
column of its runtime bucket (-1 none)."""


def _minute_field(field: str) -> _Field:
    """A minute's field: ``<minute>:r<i>`` the ends with a runtime in bucket i, else as
    ``_code_and_bucket`` reads it (a code no minute's answer reads adds nothing)."""
    minute, _, rest = field.partition(":")
    if rest[:1] == "r":
        return int(minute), -2, len(_CODES) + int(rest[1:])
    code, bucket = _code_and_bucket(rest)
    return int(minute), _COLUMN.get(code, -1), -1 if bucket < 0 else len(_CODES) + bucket


def _add_hour(
    counted: dict[int, _Minute], first_minute: int, flat: list[Any], parsed: dict[Any, _Field]
) -> None:
    """Adds one hour's fields (``HGETALL``'s flat reply) to ``counted``, by minute since
    the epoch; ``parsed`` keeps the fields read (every hour of every shard has the same
    names)."""
    fields = iter(flat)
    for raw_field, raw_count in zip(fields, fields, strict=True):
        known = parsed.get(raw_field)
        if known is None:
            known = parsed[raw_field] = _minute_field(text_or_none(raw_field) or "")
        minute, code, bucket = known
        row = counted.get(first_minute + minute)
        if row is None:
            row = counted[first_minute + minute] = [0] * _WIDTH
        count = int(raw_count)
        if code == -2:
            failed, succeeded = divmod(count, _FAILED_UNIT)
            row[_SUCCEEDED] += succeeded
            row[_FAILED] += failed
            row[bucket] += succeeded + failed
            continue
        if bucket >= 0:
            row[bucket] += count
        if code >= 0:
            row[code] += count


def stats(
    ns: Namespace, name: str | None = None, window_ms: int = 3_600_000, now_ms: int | None = None
) -> MergedPlan[TaskStats]:
    """Per-minute starts, ends by state and runtime percentiles of one task name (None:
    every task) over the last ``window_ms`` (one minute to a day): one round trip."""
    # Every shard's counts over the same window, summed minute by minute. The window ends
    # at ``now_ms``, else at the server's clock: one shard's read takes it from the server
    # itself; several shards' read it once first (one clock for all).
    if now_ms is None and ns.count > 1:
        now_ms = yield from on(0, server_time(), writes=False)
    at = now_ms
    found = yield every(ns.shards, lambda shard: _stats_counts(shard, name, window_ms, at))
    return _stats_of(name, window_ms, found)


class _StatsCounts(NamedTuple):
    """What stats.lua read of a shard over a window, before it is counted up."""

    now_ms: int
    first_hour: int
    hours: list[list[Any]]
    """Each hour's fields and counts from ``first_hour`` on, as ``HGETALL`` flattens them."""


def _stats_counts(
    shard: Shard, name: str | None, window_ms: int, now_ms: int | None
) -> Plan[_StatsCounts]:
    """stats.lua's reads of a shard over the window (``stats``' round trip)."""
    if name is not None and (not isinstance(name, str) or not name):
        raise invalid("name must be a non-empty string", field="name")
    if now_ms is not None and (type(now_ms) is not int or now_ms < 0):
        raise invalid("now_ms must be a whole number of ms >= 0", field="now_ms")
    if type(window_ms) is not int or not STATS_MINUTE_MS <= window_ms <= STATS_WINDOW_MS:
        raise invalid(
            "window_ms must be a whole number of ms from 60000 to 86400000", field="window_ms"
        )
    k = shard.keys
    given: list[int | None] = [now_ms]

    def call() -> ScriptCall:
        # The hours around the window by this host's clock (the server's may differ).
        around = time.time() * 1000 if given[0] is None else given[0]
        first = int((around - window_ms) // _HOUR_MS) - 1
        last = int(around // _HOUR_MS) + 1
        hours = [k.stats(hour, name) for hour in range(first, last + 1)]
        return ScriptCall("stats", hours, StatsArgs(window_ms, given[0], first).argv())

    def learn(reply: Any) -> None:
        given[0] = int(text_of(reply[1]))  # the server's now: its hours are sent

    reply = yield from until_given(call, learn)
    return _StatsCounts(int(reply[0]), int(reply[1]), list(reply[2]))


def _stats_of(name: str | None, window_ms: int, found: Sequence[_StatsCounts]) -> TaskStats:
    """The stats of a window from every shard's reads over it (one ``now_ms``), counted
    up minute by minute in one pass over every field."""
    counted: dict[int, _Minute] = {}
    parsed: dict[Any, _Field] = {}
    for each in found:
        for hour, flat in enumerate(each.hours, start=each.first_hour):
            _add_hour(counted, hour * 60, flat, parsed)
    now = found[0].now_ms
    last_minute = now // STATS_MINUTE_MS
    first_minute = last_minute - window_ms // STATS_MINUTE_MS + 1
    minutes = []
    window_buckets = [0] * _BUCKETS
    totals = [0] * len(_CODES)
    empty = (0,) * _BUCKETS
    first_bucket = len(_CODES)
    for minute in range(first_minute, last_minute + 1):
        row = counted.get(minute)
        if row is None:
            # The values are the book's own: built without validating them again.
            minutes.append(
                MinuteStats.model_construct(
                    minute_ms=minute * STATS_MINUTE_MS, runtime_buckets=empty
                )
            )
            continue
        buckets = tuple(row[first_bucket:])
        window_buckets = [a + b for a, b in zip(window_buckets, buckets, strict=True)]
        totals = [a + b for a, b in zip(totals, row[:first_bucket], strict=True)]
        minute_stats = MinuteStats.model_construct(
            minute_ms=minute * STATS_MINUTE_MS,
            runtime_buckets=buckets,
            p50_ms=percentile_ms(buckets, 0.5),
            p95_ms=percentile_ms(buckets, 0.95),
            p99_ms=percentile_ms(buckets, 0.99),
            started=row[_STARTED],
            succeeded=row[_SUCCEEDED],
            failed=row[_FAILED],
            expired=row[_EXPIRED],
            cancelled=row[_CANCELLED],
        )
        minutes.append(minute_stats)
    by_name = dict(zip(("started", *GROUP_END_STATES), totals, strict=True))
    ended = sum(by_name[state] for state in GROUP_END_STATES)
    return TaskStats(
        name=name,
        window_ms=window_ms,
        now_ms=now,
        minutes=tuple(minutes),
        totals=by_name,
        runtime_buckets=tuple(window_buckets),
        p50_ms=percentile_ms(window_buckets, 0.5),
        p95_ms=percentile_ms(window_buckets, 0.95),
        p99_ms=percentile_ms(window_buckets, 0.99),
        failure_rate=None if not ended else by_name["failed"] / ended,
    )


def name_totals(ns: Namespace) -> MergedPlan[list[NameTotals]]:
    """Running totals per task name, for Prometheus counters and histograms."""
    # Every shard's summed: starts, ends by state, runtime histogram and sum.
    found = yield every(ns.shards, _name_totals)
    per_name: dict[str, _Counted] = {}
    for flat in found:
        for raw_field, raw_count in flat.items():
            name, _, field = (text_or_none(raw_field) or "").rpartition("|")
            counted = per_name.get(name)
            if counted is None:
                counted = per_name[name] = ({}, [0] * _BUCKETS)
            _count(counted, *_code_and_bucket(field), int(raw_count))  # older fields add up
    return [
        NameTotals(
            name=name,
            started=codes.get("S", 0),
            runtime_buckets=tuple(buckets),
            runtime_sum_ms=codes.get("sum", 0),
            **{state: codes.get(state, 0) for state in GROUP_END_STATES},
        )
        for name, (codes, buckets) in sorted(per_name.items())
    ]


def _name_totals(shard: Shard) -> Plan[dict[Any, Any]]:
    flat: dict[Any, Any] = yield command("hgetall", shard.keys.name_totals)
    return flat


def _workers(shard: Shard, within_ms: int) -> Plan[list[WorkerSummary]]:
    """The workers a shard saw in the last ``within_ms``, most recently seen first."""
    if type(within_ms) is not int or within_ms <= 0:
        raise invalid("within_ms must be a whole number of ms > 0", field="within_ms")
    now = yield from server_time()
    k = shard.keys
    ids: list[str] = []
    names: list[str] = []

    def call() -> ScriptCall:
        keys = [k.workers, k.state_index("running")]
        keys += [k.task(id) for id in ids] + [k.worker_counts(name) for name in names]
        args = WorkersArgs(
            now - within_ms,
            WORKERS_LISTED,
            RUNNING_LOOKED_AT,
            json.dumps(ids, ensure_ascii=False),
            json.dumps(names, ensure_ascii=False),
        )
        return ScriptCall("workers", keys, args.argv())

    def learn(reply: Any) -> None:
        ids.extend(map(text_of, reply[1]))
        names.extend(map(text_of, reply[2]))

    reply = yield from until_given(call, learn)
    found = []
    for name, seen, counts, running in reply:
        started, succeeded, failed = (int(number_of(count) or 0) for count in counts)
        found.append(
            WorkerSummary(
                name=text_or_none(name) or "",
                last_seen_ms=number_of(seen) or 0,
                running=tuple(sorted(text for text in map(text_or_none, running) if text)),
                started=started,
                succeeded=succeeded,
                failed=failed,
            )
        )
    return found


def workers(ns: Namespace, within_ms: int = 86_400_000) -> MergedPlan[list[WorkerSummary]]:
    """Workers seen in the last ``within_ms``, most recently seen first."""
    # Each worker's summaries of every shard as one: counts summed, last seen the latest,
    # running tasks together; ties by name, last first, as one shard's sorted set answers.
    found = yield every(ns.shards, lambda shard: _workers(shard, within_ms))
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
    return ordered[:WORKERS_LISTED]
