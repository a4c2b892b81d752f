"""Prometheus text for ``GET /metrics``.

Tasks by state and answers by reason are the book's own counts (every client of the
book, kept in Redis), so they survive a restart of the server. Duplicate callbacks are
the ``duplicate-callback`` answers, shown as their own counter. Sweep lateness is how long
the oldest overdue deadline has been waiting for the sweep.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from .._book import AsyncBook
from .._reasons import Reason

__all__ = ["render_metrics", "sweep_lateness"]

DUPLICATE_CALLBACK = Reason.DUPLICATE_CALLBACK


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
    answers: Mapping[str, int],
    lateness: float,
    *,
    watchers: int,
    lookups: int,
    feed_resets: int = 0,
    group_watchers: int = 0,
    group_lookups: int = 0,
) -> str:
    """The exposition text (Prometheus format 0.0.4)."""
    reasons = {r: n for r, n in answers.items() if r != DUPLICATE_CALLBACK}
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
        "Events and expiries the book answered, by the reason it gave.",
        [(f'{{reason="{_escape(r)}"}}', n) for r, n in sorted(reasons.items())],
    )
    family(
        "asyncbook_duplicate_callbacks_total",
        "counter",
        "Callbacks the book ignored because their callback id was already recorded.",
        [("", answers.get(DUPLICATE_CALLBACK, 0))],
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
        "asyncbook_group_stream_watchers", "gauge", "Open group streams.", [("", group_watchers)]
    )
    family(
        "asyncbook_group_stream_lookups_total",
        "counter",
        "Rounds of book lookups made to feed group streams (changed members, then counters).",
        [("", group_lookups)],
    )
    family(
        "asyncbook_change_feed_connects_total",
        "counter",
        "Times this server (re)subscribed to the change feed.",
        [("", feed_resets)],
    )
    return "\n".join(out) + "\n"
