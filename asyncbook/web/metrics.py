"""Prometheus text for ``GET /metrics``.

Tasks by state come from the book (its own count when it has one, else a listing walk).
Transitions by reason come from the book's counters when it keeps them
(``transition_counts()``, every process's calls, duplicate callbacks included); otherwise
they are the changes this server saw on the change feed since it started, and duplicate
callbacks (never published) are not reported. Sweep lateness is how long the oldest
overdue deadline has been waiting for the sweep.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from ..book import AsyncBook
from ..models import AsyncState
from .feed import Change

__all__ = ["FeedCounters", "count_by_state", "reason_of", "render_metrics", "sweep_lateness"]

_PAGE = 1000


def reason_of(change: Change) -> str:
    """The transition reason a published change implies (every change has one)."""
    if change.state == AsyncState.QUEUED:
        return "created" if change.version == 0 else "requeued"
    if change.state == AsyncState.RUNNING:
        return "started" if change.progress == 0 else "progress"
    return change.state


class FeedCounters:
    """Changes seen on the feed, by the reason they imply."""

    def __init__(self) -> None:
        self.by_reason: Counter[str] = Counter()

    def __call__(self, change: Change) -> None:
        self.by_reason[reason_of(change)] += 1


def count_by_state(book: AsyncBook) -> dict[str, int]:
    """Tasks held in each state: the book's ``count_by_state`` if any, else a listing walk."""
    counter: Callable[[], Mapping[str, int]] | None = getattr(book, "count_by_state", None)
    if counter is not None:
        counts = dict(counter())
        return {state.value: int(counts.get(state.value, 0)) for state in AsyncState}
    result: dict[str, int] = {}
    for state in AsyncState:
        total, after = 0, None
        while True:
            page = book.list_tasks(state=state.value, limit=_PAGE, after=after)
            total += len(page.tasks)
            if page.next_after is None:
                break
            after = page.next_after
        result[state.value] = total
    return result


def sweep_lateness(book: AsyncBook, now_ms: float | None = None) -> float:
    """Seconds since the oldest deadline the sweep has not yet closed (0 when none)."""
    now = time.time() * 1000 if now_ms is None else now_ms
    due = book.overdue(now, 1)
    if not due:
        return 0.0
    task = book.get(due[0])
    if task is None:
        return 0.0
    return max(0.0, (now - float(task.expires_at_ms)) / 1000)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render_metrics(
    states: Mapping[str, int],
    reasons: Mapping[str, int],
    lateness: float,
    *,
    duplicate_callbacks: int | None,
    watchers: int,
    lookups: int,
    feed_resets: int = 0,
) -> str:
    """The exposition text (Prometheus format 0.0.4)."""
    out: list[str] = []

    def family(name: str, kind: str, doc: str, samples: list[tuple[str, Any]]) -> None:
        out.append(f"# HELP {name} {doc}")
        out.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            out.append(f"{name}{labels} {value}")

    family(
        "asyncbook_tasks",
        "gauge",
        "Tasks held in the book, by state.",
        [(f'{{state="{_escape(s)}"}}', n) for s, n in sorted(states.items())],
    )
    family(
        "asyncbook_transitions_total",
        "counter",
        "Changes seen on the change feed since this server started, by reason.",
        [(f'{{reason="{_escape(r)}"}}', n) for r, n in sorted(reasons.items())],
    )
    if duplicate_callbacks is not None:
        family(
            "asyncbook_duplicate_callbacks_total",
            "counter",
            "Callbacks the book ignored because their callback id was already recorded.",
            [("", duplicate_callbacks)],
        )
    family(
        "asyncbook_sweep_lateness_seconds",
        "gauge",
        "How long the oldest overdue deadline has waited for the expiry sweep.",
        [("", f"{lateness:.3f}")],
    )
    family("asyncbook_stream_watchers", "gauge", "Open task streams.", [("", watchers)])
    family(
        "asyncbook_stream_lookups_total",
        "counter",
        "Book lookups made to feed task streams.",
        [("", lookups)],
    )
    family(
        "asyncbook_change_feed_connects_total",
        "counter",
        "Times this server (re)subscribed to the change feed.",
        [("", feed_resets)],
    )
    return "\n".join(out) + "\n"
