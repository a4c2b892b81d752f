"""``MemoryStalls``: the heartbeat clocks of a book in memory (``MemoryBook``'s).

A task created with a heartbeat timeout has a liveness (the timeout, and whether a stall
may be retried); while it runs, a stall time by this process's clock, moved on by its
start, progress and heartbeats. The Redis book keeps the same as its ``stalls`` sorted
set. Not thread-safe: the book locks.
"""

from __future__ import annotations

import math

from ._machine import stall_event
from ._models import (
    AsyncEvent,
    AsyncState,
    AsyncTask,
    AsyncTransition,
    FailEvent,
    ProgressEvent,
    StartEvent,
)
from ._one_run import Held

__all__ = ["MemoryStalls"]


class MemoryStalls:
    """Each timed task's liveness, and each running one's stall time (see the module)."""

    def __init__(self) -> None:
        self._liveness: dict[str, tuple[int, bool]] = {}
        """Heartbeat timeout (ms) and retry-on-stall, of tasks created with a timeout."""
        self._stalls: dict[str, int] = {}
        """Running tasks with a timeout: when they stall, by this process's clock."""
        self._postponed: dict[str, int] = {}
        """When the delivery a held claim postponed is due (the Redis record's ``hp``)."""

    def timed(self, task_id: str, timeout_ms: int, retry_on_stall: bool) -> None:
        """``task_id`` was created with a heartbeat timeout."""
        self._liveness[task_id] = (timeout_ms, retry_on_stall)

    def note(self, task_id: str, event: AsyncEvent, result: AsyncTransition, now: int) -> None:
        """After a change: a running task's clock moves on; an ended one has none."""
        liveness = self._liveness.get(task_id)
        if liveness is None:
            return
        if result.task.state is not AsyncState.RUNNING:
            self._stalls.pop(task_id, None)
        elif result.changed or isinstance(event, StartEvent | ProgressEvent):
            self._stalls[task_id] = now + liveness[0]

    def stall_of(self, task_id: str) -> int | None:
        """A running timed task's stall time, or None."""
        return self._stalls.get(task_id)

    def beat(self, task_ids: list[str], now: int) -> int:
        """Heartbeats: the running ones' clocks move on; how many were running."""
        alive = [task_id for task_id in task_ids if task_id in self._stalls]
        for task_id in alive:
            self._stalls[task_id] = max(self._stalls[task_id], now + self._liveness[task_id][0])
        return len(alive)

    def due(self, now: int | float, count: int) -> list[tuple[str, FailEvent, str]]:
        """The first ``count`` stalled tasks, oldest first: (id, its fail, its callback id)."""
        due = sorted((deadline, task_id) for task_id, deadline in self._stalls.items())
        return [
            (task_id, stall_event(now, *self._liveness[task_id]), f"stalled:{task_id}:{deadline}")
            for deadline, task_id in due
            if deadline <= now
        ][:count]

    def holder(
        self, task: AsyncTask, at_ms: int | float, now: int
    ) -> tuple[FailEvent, str] | Held | None:
        """For a claim at ``at_ms``: ``Held`` while a live attempt holds ``task`` (its
        postponement noted); a stale holder's fail (always retryable: the claim is the
        redelivery) and callback id; None when nothing holds it."""
        stall = self._stalls.get(task.id)
        timed = math.isfinite(at_ms) and 0 <= at_ms < task.expires_at_ms
        if task.state is not AsyncState.RUNNING or stall is None or not timed:
            return None
        if stall > now:
            due = self._postponed.get(task.id)
            postpone = due is None or due <= now
            if postpone:
                self._postponed[task.id] = stall
            return Held(task.attempts, stall, now, postpone)
        return stall_event(now, self._liveness[task.id][0], True), f"stalled:{task.id}:{stall}"
