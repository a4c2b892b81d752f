"""Change feeds: where the status server learns that a task changed.

A feed calls ``on_change`` once per published change and ``on_reset`` whenever it
(re)connects, because changes published while it was away are lost and every watched
task has to be looked up again. ``RedisChangeFeed`` follows the book's pub/sub channel;
``BookChangeFeed`` follows the same channel through the book's own (sync) client in a
thread, so it works for every URL the book does (Sentinel, Cluster); ``LocalChangeFeed`` is
fed by the caller (a book with no channel, tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import redis.asyncio
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

__all__ = [
    "BookChangeFeed",
    "Change",
    "ChangeFeed",
    "LocalChangeFeed",
    "RedisChangeFeed",
    "parse_change",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Change:
    """One published change: the task's version, state and progress after it."""

    task_id: str
    version: int
    state: str
    progress: int | float

    def to_wire(self) -> dict[str, Any]:
        """The channel's JSON shape (camelCase)."""
        return {
            "taskId": self.task_id,
            "version": self.version,
            "state": self.state,
            "progress": self.progress,
        }


def parse_change(payload: bytes | str) -> Change | None:
    """Read a channel message; None when it is not a well-formed change."""
    try:
        data = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    task_id, version = data.get("taskId"), data.get("version")
    state, progress = data.get("state"), data.get("progress", 0)
    if not isinstance(task_id, str) or not isinstance(state, str):
        return None
    if isinstance(version, bool) or not isinstance(version, int):
        return None
    if isinstance(progress, bool) or not isinstance(progress, int | float):
        return None
    return Change(task_id=task_id, version=version, state=state, progress=progress)


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


class RedisChangeFeed:
    """Follows a Redis pub/sub channel, reconnecting with backoff when the link drops."""

    def __init__(
        self,
        connect: Callable[[], redis.asyncio.Redis],
        channel: str,
        *,
        min_backoff: float = 0.1,
        max_backoff: float = 2.0,
    ) -> None:
        self._connect = connect
        self.channel = channel
        self._min_backoff = min_backoff
        self._max_backoff = max_backoff

    @classmethod
    def from_url(cls, url: str, channel: str) -> RedisChangeFeed:
        """A feed on ``channel`` of the Redis at ``url``."""
        return cls(lambda: redis.asyncio.Redis.from_url(url), channel)

    async def listen(self, on_change: OnChange, on_reset: OnReset) -> None:
        """Deliver changes until cancelled; ``on_reset`` after every (re)subscribe."""
        delay = self._min_backoff
        while True:
            client = self._connect()
            pubsub = client.pubsub()
            try:
                await pubsub.subscribe(self.channel)
                async for message in pubsub.listen():
                    kind = message.get("type")
                    if kind == "subscribe":
                        # Also seen when redis-py resubscribes after a silent reconnect.
                        delay = self._min_backoff
                        on_reset()
                    elif kind == "message":
                        change = parse_change(message["data"])
                        if change is None:
                            log.warning("ignoring a malformed change on %s", self.channel)
                        else:
                            on_change(change)
            except (RedisConnectionError, RedisTimeoutError, OSError) as error:
                log.warning("change feed lost (%s); reconnecting in %.1fs", error, delay)
            finally:
                await _close(pubsub, client)
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._max_backoff)


class BookChangeFeed:
    """Follows a channel through a sync client's pub/sub, in one thread per listener.

    For clients with no asyncio twin at hand (a Sentinel master, a Cluster): the book's
    own client subscribes, and changes are handed to the event loop as they arrive.
    """

    def __init__(
        self, client: Any, channel: str, *, poll: float = 0.2, max_backoff: float = 2.0
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

        def follow() -> None:
            delay = 0.1
            while not stop.is_set():
                pubsub = self.client.pubsub()
                try:
                    pubsub.subscribe(self.channel)
                    while not stop.is_set():
                        message = pubsub.get_message(timeout=self._poll)
                        kind = None if message is None else message.get("type")
                        if kind == "subscribe":
                            delay = 0.1
                            hand_over(on_reset)
                        elif kind == "message":
                            change = parse_change(message["data"])
                            if change is not None:
                                hand_over(on_change, change)
                except (RedisConnectionError, RedisTimeoutError, OSError) as error:
                    log.warning("change feed lost (%s); reconnecting in %.1fs", error, delay)
                    stop.wait(delay)
                    delay = min(delay * 2, self._max_backoff)
                finally:
                    with contextlib.suppress(RedisConnectionError, RedisTimeoutError, OSError):
                        pubsub.close()

        thread = threading.Thread(target=follow, name="asyncbook-change-feed", daemon=True)
        thread.start()
        try:
            await asyncio.Event().wait()
        finally:
            stop.set()
            await asyncio.to_thread(thread.join, self._poll * 4)


async def _close(pubsub: Any, client: redis.asyncio.Redis) -> None:
    try:
        await pubsub.aclose()
        await client.aclose()
    except (RedisConnectionError, RedisTimeoutError, OSError):
        pass
