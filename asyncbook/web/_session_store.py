"""Where a signed-in session lives: sign-in adds its id, every request checks it is still
there (and keeps it for another ``SESSION_SECONDS``), sign-out ends it.

The cookie (``SessionMiddleware``, signed with itsdangerous) carries a random session id;
only its SHA-256 is stored. On a Redis book the store is the book's Redis (one key per
session on the namespace's tag, ``Keys.session``), so sign-out holds across restarts and
across servers of one book; any other book keeps its sessions in the server's memory
(a restart signs everyone out).
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..redis import RedisUnavailableError
from ._reader import OnRedis, Reader

__all__ = [
    "SESSION_SECONDS",
    "MemorySessions",
    "RedisSessions",
    "SessionStore",
    "new_session_id",
    "session_store_for",
]

SESSION_SECONDS = 7 * 24 * 3600
"""How long a session lives unused (the cookie's ``max_age`` too); each request renews it."""
MEMORY_SESSIONS = 100_000
"""Most sessions a server's memory keeps (the least recently used is ended first)."""


def new_session_id() -> str:
    """A random session id (256 bits)."""
    return secrets.token_urlsafe(32)


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode("utf-8")).hexdigest()


class SessionStore(Protocol):
    """The live sessions, by id."""

    async def add(self, session_id: str) -> None: ...

    async def alive(self, session_id: str) -> bool: ...

    async def end(self, session_id: str) -> None: ...


class MemorySessions:
    """Sessions in this process, bounded (``MEMORY_SESSIONS``)."""

    def __init__(
        self,
        seconds: float = SESSION_SECONDS,
        size: int = MEMORY_SESSIONS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.seconds = seconds
        self.size = size
        self.clock = clock
        self._until: OrderedDict[str, float] = OrderedDict()

    async def add(self, session_id: str) -> None:
        """Start a session."""
        self._until[_digest(session_id)] = self.clock() + self.seconds
        while len(self._until) > self.size:
            self._until.popitem(last=False)

    async def alive(self, session_id: str) -> bool:
        """True while the session was neither ended nor left unused too long (renewed)."""
        digest = _digest(session_id)
        until = self._until.get(digest)
        now = self.clock()
        if until is None or until <= now:
            self._until.pop(digest, None)
            return False
        self._until[digest] = now + self.seconds
        self._until.move_to_end(digest)
        return True

    async def end(self, session_id: str) -> None:
        """End the session."""
        self._until.pop(_digest(session_id), None)


Command = Callable[..., Awaitable[Any]]
"""Runs one Redis command (its name and arguments) and hands back the reply."""


class RedisSessions:
    """Sessions in the book's Redis: ``SET`` at sign-in, ``GETEX`` (renewed) per request,
    ``DEL`` at sign-out; ``RedisUnavailableError`` when the Redis does not answer."""

    def __init__(self, command: Command, key: Callable[[str], str], seconds: int) -> None:
        self._command = command
        self.key = key
        self.seconds = seconds

    async def command(self, *args: Any) -> Any:
        """One command's reply."""
        try:
            return await self._command(*args)
        except (RedisConnectionError, RedisTimeoutError) as error:
            raise RedisUnavailableError(f"the book's Redis did not answer: {error}") from error

    async def add(self, session_id: str) -> None:
        """Start a session."""
        await self.command("SET", self.key(_digest(session_id)), "1", "EX", self.seconds)

    async def alive(self, session_id: str) -> bool:
        """True while the key is there (its expiry renewed)."""
        key = self.key(_digest(session_id))
        return await self.command("GETEX", key, "EX", self.seconds) is not None

    async def end(self, session_id: str) -> None:
        """End the session."""
        await self.command("DEL", self.key(_digest(session_id)))


def session_store_for(reader: Reader, seconds: int = SESSION_SECONDS) -> SessionStore:
    """The book's Redis when the server reads one (its asyncio twin's client), else the
    server's memory."""
    if isinstance(reader, OnRedis):
        return RedisSessions(reader.client.execute_command, reader.keys.session, seconds)
    return MemorySessions(seconds)
