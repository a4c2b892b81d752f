"""``Lookups``: the streams' book lookups, one at a time per key (a task, a group), and
the back-pressure both hubs (``Hub``, ``GroupHub``) put on their watchers.

A key marked while its lookup runs is looked up once more when it ends, so a burst of
changes costs at most two lookups. An outage is retried after ``RETRY_AFTER_ERROR``
seconds; a refusal (unknown task, bad cursor) goes to every watcher of the key. A watcher
that holds too many unread batches is closed without an ``end`` (``send``): its client
reconnects.
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeGuard, TypeVar

from .._book import AsyncBook
from .._watch import Message
from ..errors import AsyncBookError, BookUnavailableError
from ._reader import Reader, reader_for
from ._sse import format_event

__all__ = ["RETRY_AFTER_ERROR", "Batch", "Lookups", "StreamWatcher"]

log = logging.getLogger(__name__)

RETRY_AFTER_ERROR = 1.0
"""Seconds before a lookup that failed (Redis unreachable) is tried again."""


@dataclass(frozen=True)
class Batch:
    """Messages for one watcher, already encoded as server-sent events."""

    payload: bytes
    end: bool

    @classmethod
    def of(cls, messages: list[Message]) -> Batch:
        """Encode ``messages`` (a batch is shared by every watcher at the same cursor)."""
        payload = b"".join(format_event(m.event, m.data, m.id) for m in messages)
        return cls(payload=payload, end=bool(messages) and messages[-1].event == "end")


CLOSED = Batch(payload=b"", end=True)
"""Closes a stream without an ``end`` event: the task or group goes on, the client
reconnects."""


@dataclass(eq=False)
class StreamWatcher:
    """One stream client: what it watches (``key``), sent nothing yet (``fresh``), gone
    (``done``), and its queue of batches."""

    key: str
    fresh: bool = True
    queue: asyncio.Queue[Batch | BaseException] = field(default_factory=asyncio.Queue)
    done: bool = False


W = TypeVar("W", bound=StreamWatcher)


class Lookups(ABC, Generic[W]):
    """Watchers by key; schedules ``deliver(key)`` for watched keys, one lookup at a time
    per key, and hands the batches found to the key's watchers (``send``)."""

    noun = ""
    """What a key names, for logs ("group " for a group; nothing for a task)."""

    def __init__(self, book: AsyncBook | Reader) -> None:
        self.book = reader_for(book)
        """The book, read awaited (``reader_for``)."""
        self._running: dict[str, asyncio.Task[None]] = {}
        self._dirty: set[str] = set()
        self._watchers: dict[str, set[W]] = {}

    @abstractmethod
    async def deliver(self, key: str) -> None:
        """Look ``key`` up and send its watchers what they miss."""

    def forget(self, key: str) -> None:
        """The last watcher of ``key`` left (a hub drops what it kept for it)."""

    @property
    def watcher_count(self) -> int:
        """Stream clients connected now."""
        return sum(len(watchers) for watchers in self._watchers.values())

    def add(self, watcher: W) -> W:
        """Register a stream client; its first batch follows (a lookup is scheduled)."""
        self._watchers.setdefault(watcher.key, set()).add(watcher)
        self.schedule(watcher.key)
        return watcher

    def unwatch(self, watcher: W) -> None:
        """Forget a stream client (it disconnected or its stream ended); a key nobody
        watches is forgotten too."""
        watcher.done = True
        watchers = self._watchers.get(watcher.key)
        if watchers is not None:
            watchers.discard(watcher)
            if not watchers:
                del self._watchers[watcher.key]
                self.forget(watcher.key)

    def watchers_of(self, key: str) -> Iterable[W]:
        """The watchers of ``key`` now (none when nobody watches it)."""
        return self._watchers.get(key, ())

    def watched_keys(self) -> Iterable[str]:
        """Every key with watchers."""
        return self._watchers

    def send(self, watcher: W, batch: Batch, backlog: int) -> None:
        """Queue ``batch`` for ``watcher``; one holding ``backlog`` unread batches already
        is too slow a reader: what it has not read is dropped and its stream closed
        without an ``end`` (its client reconnects: resumes, or starts over)."""
        if watcher.queue.qsize() >= backlog:
            while not watcher.queue.empty():
                watcher.queue.get_nowait()
            watcher.queue.put_nowait(CLOSED)
            self.unwatch(watcher)
            return
        watcher.queue.put_nowait(batch)
        if batch.end:
            self.unwatch(watcher)

    def fail(self, key: str, error: Exception, fresh_only: bool = False) -> None:
        """Send ``error`` to the watchers of ``key`` (only those sent nothing yet, with
        ``fresh_only``) and end their streams."""
        for watcher in list(self.watchers_of(key)):
            if watcher.fresh or not fresh_only:
                watcher.queue.put_nowait(error)
                self.unwatch(watcher)

    def close_streams(self) -> None:
        """Stop pending lookups and close every stream (without ``end``)."""
        for task in list(self._running.values()):
            task.cancel()
        for key in list(self.watched_keys()):
            for watcher in list(self.watchers_of(key)):
                watcher.queue.put_nowait(CLOSED)
                self.unwatch(watcher)

    def again(self, key: str) -> None:
        """Look ``key`` up once more after the lookup that runs now."""
        self._dirty.add(key)

    def schedule(self, key: str) -> None:
        """Look ``key`` up (once more after the running lookup, if one runs)."""
        if key in self._running:
            self._dirty.add(key)
            return
        self._running[key] = asyncio.get_running_loop().create_task(self._refresh(key))

    async def _refresh(self, key: str) -> None:
        try:
            while True:
                self._dirty.discard(key)
                try:
                    await self.deliver(key)
                except Exception as error:
                    if _final(error):
                        self.fail(key, error)
                    else:
                        log.warning("looking up %s%r failed (%s); retrying", self.noun, key, error)
                        self.fail(key, error, fresh_only=True)
                        await asyncio.sleep(RETRY_AFTER_ERROR)
                        self._dirty.add(key)
                if key not in self._dirty or key not in self._watchers:
                    return
        finally:
            del self._running[key]


def _final(error: Exception) -> TypeGuard[AsyncBookError]:
    """A refusal every watcher of the key gets (unknown task or group, bad cursor or id),
    not an outage."""
    return isinstance(error, AsyncBookError) and not isinstance(error, BookUnavailableError)
