"""Fan-out of one change feed to many stream watchers.

A watcher costs nothing while its task is quiet. When a change arrives for a watched
task, the hub resumes the task once from the lowest version any of its watchers has
seen (again only for watchers that lot could not serve) and hands every watcher just
the messages it lacks, in version order. Lookups for one task never overlap: a change
that arrives meanwhile marks the task dirty and runs one more round.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from .._book import AsyncBook
from .._watch import messages_for
from ._feed import Change
from ._lookups import Batch, Lookups, StreamWatcher
from ._reader import Reader

__all__ = ["Batch", "Hub", "Watcher"]

WATCHER_BACKLOG = 10_000
"""Unread batches a watcher may hold before its stream is closed (its client resumes)."""


@dataclass(eq=False)
class Watcher(StreamWatcher):
    """One task stream client (its ``key`` the task id): the last version it was sent."""

    version: int = 0


class Hub(Lookups[Watcher]):
    """Watchers by task, fed from the book when the change feed says something moved."""

    def __init__(self, book: AsyncBook | Reader) -> None:
        super().__init__(book)
        self._listeners: set[asyncio.Queue[Change | None]] = set()
        self.lookups = 0
        self.resets = 0

    def watch(self, task_id: str, cursor: int) -> Watcher:
        """Register a stream client that has seen ``cursor``; its first batch follows."""
        return self.add(Watcher(key=task_id, version=cursor))

    def follow(self) -> asyncio.Queue[Change | None]:
        """A queue of every change as published (no lookups); None means "resync"."""
        queue: asyncio.Queue[Change | None] = asyncio.Queue(maxsize=WATCHER_BACKLOG)
        self._listeners.add(queue)
        return queue

    def unfollow(self, queue: asyncio.Queue[Change | None]) -> None:
        """Stop following changes."""
        self._listeners.discard(queue)

    def on_change(self, change: Change) -> None:
        """The feed saw a change: look the task up if a watcher lacks that version."""
        for queue in list(self._listeners):
            _offer(queue, change)
        group = list(self.watchers_of(change.task_id))
        if group and any(w.fresh or w.version < change.version for w in group):
            self.schedule(change.task_id)

    def on_reset(self) -> None:
        """The feed (re)connected: changes may have been missed, look every task up."""
        self.resets += 1
        for queue in list(self._listeners):
            _offer(queue, None)
        for task_id in list(self.watched_keys()):
            self.schedule(task_id)

    async def close(self) -> None:
        """End every stream and stop pending lookups."""
        self.close_streams()
        for queue in list(self._listeners):
            queue.put_nowait(None)

    async def deliver(self, task_id: str) -> None:
        waiting = set(self.watchers_of(task_id))
        while waiting:
            cursor = min(w.version for w in waiting)
            self.lookups += 1
            result = await self.book.resume(task_id, cursor, full_task=False)
            retention = self.book.retention_versions
            # Watchers at the same cursor get the same bytes: build and encode them once.
            served: dict[tuple[int, bool], list[Watcher]] = {}
            for watcher in list(waiting):
                if watcher.done:
                    waiting.discard(watcher)
                    continue
                behind = result.task.version - watcher.version
                if result.mode == "delta" or behind <= 0 or behind > retention:
                    waiting.discard(watcher)
                    served.setdefault((watcher.version, watcher.fresh), []).append(watcher)
            for (version, fresh), group in served.items():
                messages = messages_for(result, version, fresh)
                batch = Batch.of(messages) if messages else None
                for watcher in group:
                    if batch is not None:
                        self.send(watcher, batch, WATCHER_BACKLOG)
                    watcher.version = max(watcher.version, result.task.version)
                    watcher.fresh = False


def _offer(queue: asyncio.Queue[Change | None], item: Change | None) -> None:
    try:
        queue.put_nowait(item)
    except asyncio.QueueFull:
        # A follower that cannot keep up loses its backlog and is told to resync.
        while not queue.empty():
            queue.get_nowait()
        queue.put_nowait(None)
