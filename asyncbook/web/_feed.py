"""Change feeds: where the status server learns that a task changed.

A feed calls ``on_change`` once per published change and ``on_reset`` whenever it
(re)connects, because changes published while it was away are lost and every watched
task has to be looked up again. ``BookChangeFeed`` follows the book's channel through
the book's own client (every URL the book takes: TLS, Sentinel, Cluster, an embedded
fakeredis) with the follower ``asyncbook watch`` uses, in a thread; ``LocalChangeFeed``
is fed by the caller (a book with no channel, tests).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ..redis import Change, follow_changes

__all__ = ["BookChangeFeed", "Change", "ChangeFeed", "LocalChangeFeed"]

OnChange = Callable[[Change], None]
OnReset = Callable[[], None]


class ChangeFeed(Protocol):
    """A source of changes, followed by one listener per server process."""

    async def listen(self, on_change: OnChange, on_reset: OnReset) -> None:
        """Run until cancelled, calling ``on_change`` per change, ``on_reset`` per (re)connect."""
        ...


class LocalChangeFeed:
    """A feed in this process: ``publish`` (from any thread) reaches the listener."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[Change] | None = None

    def publish(self, change: Change) -> None:
        """Hand one change to the listener; dropped when nobody listens yet."""
        loop, queue = self._loop, self._queue
        if loop is None or queue is None or loop.is_closed():
            return
        loop.call_soon_threadsafe(queue.put_nowait, change)

    async def listen(self, on_change: OnChange, on_reset: OnReset) -> None:
        """Deliver published changes until cancelled."""
        self._loop, self._queue = asyncio.get_running_loop(), asyncio.Queue()
        on_reset()
        try:
            while True:
                on_change(await self._queue.get())
        finally:
            self._loop = self._queue = None


class BookChangeFeed:
    """Follows a channel (or several: a sharded book's, ``change_channels``) through a
    (sync) client's pub/sub, in one thread per listener.

    Changes are handed to the event loop as they arrive.
    """

    def __init__(
        self,
        client: Any,
        channel: str | Sequence[str],
        *,
        poll: float = 0.2,
        max_backoff: float = 2.0,
    ) -> None:
        self.client = client
        self.channel = channel
        self._poll = poll
        self._max_backoff = max_backoff

    async def listen(self, on_change: OnChange, on_reset: OnReset) -> None:
        """Deliver changes until cancelled; ``on_reset`` after every (re)subscribe."""
        loop = asyncio.get_running_loop()
        stop = threading.Event()

        def hand_over(callback: Callable[..., None], *args: Any) -> None:
            if not stop.is_set():
                loop.call_soon_threadsafe(callback, *args)

        thread = threading.Thread(
            target=follow_changes,
            args=(
                self.client,
                self.channel,
                lambda change: hand_over(on_change, change),
                lambda: hand_over(on_reset),
            ),
            kwargs={"stop": stop.is_set, "poll": self._poll, "max_backoff": self._max_backoff},
            name="asyncbook-change-feed",
            daemon=True,
        )
        thread.start()
        try:
            await asyncio.Event().wait()
        finally:
            stop.set()
            await asyncio.to_thread(thread.join, self._poll * 4)
