"""Tracked tasks stranded: queued longer than ``STRANDED_AFTER_MS`` in a queue that no
online worker consumes (by the workers' records, ``_fleet``). Only the
``STRANDED_LOOKED_AT`` oldest queued tasks are looked at (one search page), so a check
costs the same however many tasks wait."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ._console import SearchRow, TaskQuery

__all__ = ["STRANDED_AFTER_MS", "STRANDED_LOOKED_AT", "stranded", "stranded_query"]

STRANDED_AFTER_MS = 300_000
"""A queued task waiting this long (5 minutes) for a queue nobody consumes is stranded."""
STRANDED_LOOKED_AT = 100
"""The oldest queued tasks looked at."""


def stranded_query() -> TaskQuery:
    """The search whose page holds the oldest queued tasks."""
    return TaskQuery(state="queued", sort="oldest", limit=STRANDED_LOOKED_AT)


def stranded(
    rows: Sequence[SearchRow], consumers: Mapping[str, int], now_ms: float
) -> dict[str, int]:
    """Per queue, how many of ``rows`` were created over ``STRANDED_AFTER_MS`` ago and
    wait in a queue no online worker consumes (a task of no recorded queue: not told)."""
    counts: dict[str, int] = {}
    for row in rows:
        queue, created = row.info.queue, row.info.created_at_ms
        if queue is None or created is None or created > now_ms - STRANDED_AFTER_MS:
            continue
        if not consumers.get(queue):
            counts[queue] = counts.get(queue, 0) + 1
    return dict(sorted(counts.items()))
