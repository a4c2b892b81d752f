"""The listings of a sharded namespace as merged plans (``_merged``), for both facades:
the newest-first page and the overdue ids."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any

from .._checks import require_limit, require_page_cursor, require_state
from .._models import STATE_NAMES, TaskPage
from ._groups import tasks_in_order
from ._merged import MergedPlan, OnShards
from ._plan import SETTLE, Pipeline, Plan, command
from ._replies import text_of
from ._shard import Shard

__all__ = ["newest_page", "overdue"]

_Rows = tuple[list[tuple[Any, float]], float | None]
"""One shard's rows of a page (id, creation order), and the highest creation order its
unread rows may have (None: it has none unread)."""


def newest_page(
    shards: Sequence[Shard],
    state: str | None,
    limit: int,
    after: str | None,
    full_task: bool,
) -> MergedPlan[TaskPage]:
    """Every shard's page merged by creation order (unique across shards).

    Each shard is asked first for a few rows per state (twice its share of the page, and
    2); a shard is asked again for a whole page only when a list of it was cut above the
    page's last row (its unread rows could belong on the page). So a merge reads about
    twice the page's rows per state, not S pages."""
    wanted = require_state(state)
    count = require_limit(limit)
    cursor = require_page_cursor(after)
    states = STATE_NAMES if wanted is None else (wanted,)
    top = "+inf" if cursor is None else f"({cursor}"
    first = min(count + 1, 2 * -(-(count + 1) // len(shards)) + 2)
    pages: list[_Rows] = yield OnShards(
        tuple(_newest_rows(shard, states, top, first) for shard in shards)
    )
    if first <= count:
        scores = sorted((score for rows, _ in pages for _, score in rows), reverse=True)
        last = scores[count] if len(scores) > count else float("-inf")
        again = tuple(i for i, (_, bound) in enumerate(pages) if bound is not None and bound > last)
        if again:
            full = yield OnShards(
                tuple(_newest_rows(shards[i], states, top, count + 1) for i in again), again
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
    tasks = yield from tasks_in_order(shards, merged, full_task)
    return TaskPage(tasks=tasks, next_after=str(int(merged[-1][0])) if more else None)


def overdue(shards: Sequence[Shard], now: float, count: int) -> MergedPlan[list[str]]:
    """Every shard's overdue ids merged, earliest deadline first."""
    rows = yield OnShards(tuple(_deadline_rows(shard, now, count) for shard in shards))
    merged = heapq.merge(*rows, key=lambda row: (row[1], row[0]))
    return [task_id for task_id, _ in list(merged)[:count]]


def _deadline_rows(shard: Shard, now: float, count: int) -> Plan[list[tuple[str, float]]]:
    rows = yield command(
        "zrangebyscore", shard.keys.deadlines, "-inf", now, start=0, num=count, withscores=True
    )
    return [(text_of(raw), float(score)) for raw, score in rows]


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
