"""The console's counts of a Redis book: per-minute stats over a window and running
totals per task name, as the task scripts count them (lua/_info.lua's count_minute), and
the workers seen with their counts and running tasks.

Every shard's counts are read together and added up, and the answer is built from the
sums (a percentile of a merged histogram, never an average of them).
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

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
from ._fleet import worker_records
from ._indexer import caught_up
from ._merged import MergedPlan, asked, every, on
from ._plan import Plan, ScriptCall, command, server_time
from ._replies import text_of
from ._script_args import StatsArgs, WorkersArgs

if TYPE_CHECKING:
    from ._namespace import Namespace
    from ._shard import Shard

__all__ = ["name_totals", "stats", "workers"]

_HOUR_MS = 3_600_000
WORKERS_LISTED = 500
RUNNING_LOOKED_AT = 10_000


_FAILED_UNIT = 1 << 31
"""A failed run's share of a ``<minute>:r<i>`` count (STATS_FAILED_UNIT in _info.lua)."""

_COUNTED = ("started", *GROUP_END_STATES)
"""What a minute and a name count, in the order of a row's first columns (``_Row``)."""
_COLUMN = {code: column for column, code in enumerate(("S", *GROUP_END_STATES, "sum"))}
_SUCCEEDED, _FAILED, _FIRST_BUCKET = _COLUMN["succeeded"], _COLUMN["failed"], len(_COLUMN)
_WIDTH = _FIRST_BUCKET + len(RUNTIME_BUCKETS_MS) + 1

_Row = list[int]
"""The counts of a minute or a name: one per code (S, the ends, ``sum`` of runtimes),
then one per runtime bucket."""
_Field = tuple[int, int]
"""What a stats field adds to: the column of its code (-1 none; -2 the ends with a
runtime, ``<minute>:r<i>``: succeeded and failed in one number) and the column of its
runtime bucket (-1 none)."""


def _field(field: str) -> _Field:
    """What one stats field counts (_info.lua's count_minute), its minute or name cut
    off: ``<code>`` a code, ``<code>:<i>`` a code and a runtime in bucket i, ``r<i>`` the
    ends with a runtime in bucket i. ``b<i>``, a runtime alone, is a field of the layout
    before one write per event: read as it was. A code no answer reads adds nothing."""
    code, _, bucket = field.partition(":")
    if code[:1] in ("r", "b") and not bucket:
        return (-2 if code[0] == "r" else -1), _FIRST_BUCKET + int(code[1:])
    return _COLUMN.get(code, -1), (_FIRST_BUCKET + int(bucket) if bucket else -1)


def _add(row: _Row, field: _Field, count: int) -> None:
    code, bucket = field
    if code == -2:
        failed, succeeded = divmod(count, _FAILED_UNIT)
        row[_SUCCEEDED] += succeeded
        row[_FAILED] += failed
        count = succeeded + failed
    elif code >= 0:
        row[code] += count
    if bucket >= 0:
        row[bucket] += count


def stats(
    ns: Namespace, name: str | None = None, window_ms: int = 3_600_000, now_ms: int | None = None
) -> MergedPlan[TaskStats]:
    """Per-minute starts, ends by state and runtime percentiles of one task name (None:
    every task) over the last ``window_ms`` (one minute to a day): one round trip."""
    if name is not None and (not isinstance(name, str) or not name):
        raise invalid("name must be a non-empty string", field="name")
    if now_ms is not None and (type(now_ms) is not int or now_ms < 0):
        raise invalid("now_ms must be a whole number of ms >= 0", field="now_ms")
    if type(window_ms) is not int or not STATS_MINUTE_MS <= window_ms <= STATS_WINDOW_MS:
        raise invalid(
            "window_ms must be a whole number of ms from 60000 to 86400000", field="window_ms"
        )
    # The window ends at ``now_ms``, else at the server's clock: one shard's read takes it
    # itself; several shards' read it once first (one clock for all).
    if now_ms is None and ns.count > 1:
        now_ms = yield from on(0, server_time(), writes=False)
    yield from caught_up(ns.shards)
    found = yield every(ns.shards, lambda shard: _stats_counts(shard, name, window_ms, now_ms))
    return _stats_of(name, window_ms, found)


def _stats_counts(shard: Shard, name: str | None, window_ms: int, now_ms: int | None) -> Plan[Any]:
    """stats.lua's reads of a shard over the window (``stats``' round trip): the
    server's now, the first hour read, and each hour's fields and counts from it on, as
    ``HGETALL`` flattens them."""
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

    return (yield from until_given(call, learn))


def _stats_of(name: str | None, window_ms: int, found: Sequence[Any]) -> TaskStats:
    """The stats of a window from every shard's reads over it (one ``now_ms``), counted
    up minute by minute in one pass over every field."""
    counted: defaultdict[int, _Row] = defaultdict(lambda: [0] * _WIDTH)
    parsed: dict[Any, tuple[int, _Field]] = {}  # every hour of every shard has these fields
    for _now, first_hour, hours in found:
        for hour, flat in enumerate(hours, start=int(first_hour)):
            for raw_field, raw_count in zip(flat[::2], flat[1::2], strict=True):
                known = parsed.get(raw_field)
                if known is None:
                    of_hour, _, field = text_of(raw_field).partition(":")
                    known = parsed[raw_field] = (int(of_hour), _field(field))
                _add(counted[hour * 60 + known[0]], known[1], int(raw_count))
    now = int(found[0][0])
    last_minute = now // STATS_MINUTE_MS
    first_minute = last_minute - window_ms // STATS_MINUTE_MS + 1
    zeros = [0] * _WIDTH
    rows = {minute: counted.get(minute, zeros) for minute in range(first_minute, last_minute + 1)}
    window = [sum(column) for column in zip(*rows.values(), strict=True)]
    # The values are the book's own: built without validating them again.
    minutes = tuple(
        MinuteStats.model_construct(
            minute_ms=minute * STATS_MINUTE_MS,
            runtime_buckets=tuple(row[_FIRST_BUCKET:]),
            **_percentiles(row[_FIRST_BUCKET:]),
            **_counts(row),
        )
        for minute, row in rows.items()
    )
    totals = _counts(window)
    ended = sum(totals[state] for state in GROUP_END_STATES)
    buckets = tuple(window[_FIRST_BUCKET:])
    return TaskStats(
        name=name,
        window_ms=window_ms,
        now_ms=now,
        minutes=minutes,
        totals=totals,
        runtime_buckets=buckets,
        **_percentiles(buckets),
        failure_rate=None if not ended else totals["failed"] / ended,
    )


def _percentiles(buckets: Sequence[int]) -> dict[str, Any]:
    return {f"p{n}_ms": percentile_ms(buckets, n / 100) for n in (50, 95, 99)}


def _counts(row: _Row) -> dict[str, Any]:
    return dict(zip(_COUNTED, row, strict=False))


def name_totals(ns: Namespace) -> MergedPlan[list[NameTotals]]:
    """Running totals per task name, for Prometheus counters and histograms."""
    # Every shard's summed: starts, ends by state, runtime histogram and sum.
    yield from caught_up(ns.shards)
    found = yield every(ns.shards, lambda shard: asked(command("hgetall", shard.keys.name_totals)))
    rows: defaultdict[str, _Row] = defaultdict(lambda: [0] * _WIDTH)
    for flat in found:
        for raw_field, raw_count in flat.items():
            name, _, field = text_of(raw_field).rpartition("|")
            _add(rows[name], _field(field), int(raw_count))  # older fields add up
    return [
        NameTotals(
            name=name,
            runtime_buckets=tuple(row[_FIRST_BUCKET:]),
            runtime_sum_ms=row[_COLUMN["sum"]],
            **_counts(row),
        )
        for name, row in sorted(rows.items())
    ]


def workers(ns: Namespace, within_ms: int = 86_400_000) -> MergedPlan[list[WorkerSummary]]:
    """Workers seen in the last ``within_ms`` (their tasks, or their records), online
    ones first, then the most recently seen first."""
    if type(within_ms) is not int or within_ms <= 0:
        raise invalid("within_ms must be a whole number of ms > 0", field="within_ms")
    # Each worker's rows of every shard as one: counts summed, last seen the latest,
    # running tasks together; ties by name, last first, as one shard's sorted set answers.
    yield from caught_up(ns.shards)
    found = yield every(ns.shards, lambda shard: _workers(shard, within_ms))
    merged: dict[str, tuple[list[Any], set[str]]] = {}
    for name, seen, counts, running in (row for rows in found for row in rows):
        known, tasks = merged.setdefault(text_or_none(name) or "", ([0, 0, 0, 0], set()))
        known[0] = max(known[0], number_of(seen) or 0)
        for column, count in enumerate(counts, start=1):
            known[column] += int(number_of(count) or 0)
        tasks.update(text for text in map(text_or_none, running) if text)
    # Each worker's record (``_fleet``) beside: online ones first, then by last seen.
    records, now = yield from worker_records(ns)
    announced = {
        r.name: (r, live) for r, live in records if live or r.renewed_ms >= now - within_ms
    }
    for name, (record, _live) in announced.items():
        known, tasks = merged.setdefault(name, ([0, 0, 0, 0], set()))
        known[0] = max(known[0], record.renewed_ms)
        tasks.update(record.running)
    summaries = [
        WorkerSummary(
            name=name,
            last_seen_ms=seen,
            running=tuple(sorted(tasks)),
            started=started,
            succeeded=succeeded,
            failed=failed,
            online=announced[name][1] if name in announced else None,
            record=announced[name][0] if name in announced else None,
        )
        for name, ([seen, started, succeeded, failed], tasks) in merged.items()
    ]
    ordered = sorted(
        summaries, key=lambda w: (bool(w.online), w.last_seen_ms, w.name), reverse=True
    )
    return ordered[:WORKERS_LISTED]


def _workers(shard: Shard, within_ms: int) -> Plan[Any]:
    """workers.lua's rows of the workers a shard saw in the last ``within_ms``, most
    recently seen first: name, last seen, counts (started, succeeded, failed), running."""
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

    return (yield from until_given(call, learn))
