"""Whether the expiry sweep is running: when it last ran, and how many tasks wait for it.

A task past its deadline is normal for up to a second (the sweep runs every second);
tasks overdue while no sweep ran for ``SILENT_MS`` mean the sweep stopped. The status
server's ``/api/health`` and ``/metrics``, the page's banner, the workers' warning and
``asyncbook doctor`` all read this one answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._book import AsyncBook

__all__ = ["SILENT_MS", "SweepHealth", "sweep_health"]

SILENT_MS = 30_000
"""No sweep for this long, with tasks overdue, is unhealthy."""


@dataclass(frozen=True)
class SweepHealth:
    """The sweep's health, read from a book at ``now_ms`` (the book's clock)."""

    now_ms: int
    """The book's clock when read."""
    last_sweep_ms: int | None
    """When a sweep last ran, or None if none ever did."""
    overdue: int
    """Live tasks whose deadline has passed (the sweep has yet to expire them)."""
    silent_ms: int = SILENT_MS
    """How long without a sweep counts as stopped."""

    @property
    def sweep_age_ms(self) -> int | None:
        """How long ago the last sweep ran (None: never)."""
        return None if self.last_sweep_ms is None else max(0, self.now_ms - self.last_sweep_ms)

    @property
    def stopped(self) -> bool:
        """No sweep ran within ``silent_ms`` (or none ever did)."""
        age = self.sweep_age_ms
        return age is None or age > self.silent_ms

    @property
    def ok(self) -> bool:
        """False while tasks are overdue and the sweep has stopped."""
        return not (self.overdue and self.stopped)

    def problem(self) -> str | None:
        """What is wrong, in one sentence, or None when healthy."""
        if self.ok:
            return None
        age = self.sweep_age_ms
        since = "no sweep ever ran" if age is None else f"no sweep ran for {age // 1000} s"
        return f"{self.overdue} task(s) past their deadline and {since}"

    def to_wire(self) -> dict[str, Any]:
        """The camelCase JSON shape of ``GET /api/health``."""
        return {
            "ok": self.ok,
            "sweepStopped": self.stopped,
            "nowMs": self.now_ms,
            "lastSweepMs": self.last_sweep_ms,
            "lastSweepAgeMs": self.sweep_age_ms,
            "overdueTasks": self.overdue,
            "silentAfterMs": self.silent_ms,
            "problem": self.problem(),
        }


def sweep_health(book: AsyncBook, silent_ms: int = SILENT_MS) -> SweepHealth:
    """Read the sweep's health from ``book`` (three cheap reads, by the book's clock)."""
    now = book.now_ms()
    return SweepHealth(
        now_ms=now,
        last_sweep_ms=book.last_sweep_ms(),
        overdue=book.overdue_count(now),
        silent_ms=silent_ms,
    )
