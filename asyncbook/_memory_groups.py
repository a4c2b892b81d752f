"""``MemoryGroups``: the groups of a book in memory (``MemoryBook``'s).

A group's state is what the Redis book keeps in its group hash and lists: a counter per
state, ``members`` and ``prog`` (the sum of the members' progress), the size once sealed,
its members in creation order, and its one notification once that many members ended.
The book calls ``join`` at a create and ``note`` after each change of a member; the
counters move with the task, never recounted. Not thread-safe: the book locks.
"""

from __future__ import annotations

from collections import Counter

from ._models import (
    GROUP_END_STATES,
    AsyncEvent,
    AsyncTask,
    AsyncTransition,
    GroupNotification,
    GroupSummary,
    group_summary,
)

__all__ = ["MemoryGroups"]


class MemoryGroups:
    """Each group's counters, size, members and notification (see the module)."""

    def __init__(self) -> None:
        self._member_of: dict[str, str] = {}
        self._counters: dict[str, Counter[str]] = {}
        """Per group: members, a count per state, prog (the sum of its members' progress)."""
        self._totals: dict[str, int] = {}
        self._members: dict[str, list[str]] = {}
        self._notified: set[str] = set()
        self._notes: list[GroupNotification] = []

    def join(self, task_id: str, group: str) -> None:
        """A task created queued in ``group``."""
        self._member_of[task_id] = group
        counters = self._counters.setdefault(group, Counter())
        counters["members"] += 1
        counters["queued"] += 1
        self._members.setdefault(group, []).append(task_id)

    def note(
        self, task_id: str, before: AsyncTask, event: AsyncEvent, result: AsyncTransition
    ) -> None:
        """A task changed (or not): its group's counters follow it."""
        group = self._member_of.get(task_id)
        if group is None or not result.changed:
            return
        counters, after = self._counters[group], result.task
        if after.state is not before.state:
            counters[before.state.value] -= 1
            counters[after.state.value] += 1
        counters["prog"] += int(after.progress) - int(before.progress)
        if after.terminal:
            self._maybe_ended(group, event.at_ms)

    def _maybe_ended(self, group: str, at_ms: int | float) -> None:
        counters = self._counters[group]
        total = self._totals.get(group)
        ended = sum(counters[state] for state in GROUP_END_STATES)
        if total is None or group in self._notified or ended < total:
            return
        self._notified.add(group)
        counts = {state: counters[state] for state in GROUP_END_STATES}
        self._notes.append(
            GroupNotification(group_id=group, at_ms=at_ms, total=total, counts=counts)
        )

    def seal(self, group: str, size: int, at_ms: int | float) -> GroupSummary:
        """Declare the group's size (notified at ``at_ms`` if that many already ended)."""
        self._counters.setdefault(group, Counter())
        self._totals[group] = size
        self._maybe_ended(group, at_ms)
        return self._summary(group)

    def summary(self, group: str) -> GroupSummary | None:
        """The group's counts by state and mean progress; None if unknown."""
        return self._summary(group) if group in self._counters else None

    def _summary(self, group: str) -> GroupSummary:
        fields: dict[str, int | None] = dict(self._counters[group])
        fields["total"] = self._totals.get(group)
        return group_summary(group, fields)

    def members(self, group: str, limit: int) -> list[str]:
        """The ids of the group's first ``limit`` members, in creation order."""
        return self._members.get(group, [])[:limit]

    def drain(self) -> list[GroupNotification]:
        """Every pending group notification, in order; empties them."""
        notes, self._notes = self._notes, []
        return notes
