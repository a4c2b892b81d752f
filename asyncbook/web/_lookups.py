"""``Lookups``: the streams' book lookups, one at a time per key (a task, a group).

A key marked while its lookup runs is looked up once more when it ends, so a burst of
changes costs at most two lookups. An outage is retried after ``RETRY_AFTER_ERROR``
seconds; a refusal (unknown task, bad cursor) goes to every watcher of the key.
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from typing import TypeGuard

from .._book import AsyncBook
from ..errors import AsyncBookError, BookUnavailableError
from ._reader import Reader, RunSync, reader_for

__all__ = ["RETRY_AFTER_ERROR", "Lookups"]

log = logging.getLogger(__name__)

RETRY_AFTER_ERROR = 1.0
"""Seconds before a lookup that failed (Redis unreachable) is tried again."""


class Lookups(ABC):
    """Schedules ``_deliver(key)`` for watched keys, one lookup at a time per key."""

    noun = ""
    """What a key names, for logs ("group " for a group; nothing for a task)."""

    def __init__(self, book: AsyncBook | Reader, run_sync: RunSync | None = None) -> None:
        self.book = reader_for(book, run_sync)
        """The book, read awaited (``reader_for``: ``run_sync`` runs a sync book's calls)."""
        self._running: dict[str, asyncio.Task[None]] = {}
        self._dirty: set[str] = set()

    @abstractmethod
    async def _deliver(self, key: str) -> None:
        """Look ``key`` up and send its watchers what they miss."""

    @abstractmethod
    def _watched(self, key: str) -> bool:
        """True while ``key`` has watchers."""

    @abstractmethod
    def _fail(self, key: str, error: AsyncBookError) -> None:
        """Send a refusal to every watcher of ``key`` (and end them)."""

    @abstractmethod
    def _fail_fresh(self, key: str, error: Exception) -> None:
        """An outage: tell the watchers still waiting for their first answer."""

    def _cancel_lookups(self) -> None:
        for task in list(self._running.values()):
            task.cancel()

    def _schedule(self, key: str) -> None:
        if key in self._running:
            self._dirty.add(key)
            return
        self._running[key] = asyncio.get_running_loop().create_task(self._refresh(key))

    async def _refresh(self, key: str) -> None:
        try:
            while True:
                self._dirty.discard(key)
                try:
                    await self._deliver(key)
                except Exception as error:
                    if _final(error):
                        self._fail(key, error)
                    else:
                        log.warning("looking up %s%r failed (%s); retrying", self.noun, key, error)
                        self._fail_fresh(key, error)
                        await asyncio.sleep(RETRY_AFTER_ERROR)
                        self._dirty.add(key)
                if key not in self._dirty or not self._watched(key):
                    return
        finally:
            del self._running[key]


def _final(error: Exception) -> TypeGuard[AsyncBookError]:
    """A refusal every watcher of the key gets (unknown task or group, bad cursor or id),
    not an outage."""
    return isinstance(error, AsyncBookError) and not isinstance(error, BookUnavailableError)
