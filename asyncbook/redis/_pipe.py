"""``Pipe``: a connection of this process's own on which calls are written at once and
their replies read later, in order, each with its writer's token. ``CreateSender`` (a
publisher's creates) and ``DeferredWrites`` (the result backend's execution writes) are
its two users; what each does with a reply is its own.

A forked child forgets its parent's connection and tokens (the socket is the parent's).
An outage while writing or reading leaves the replies not yet read unknowable: ``close``
the connection, and ``drop`` hands their tokens back (each call may or may not have run).
"""

from __future__ import annotations

import contextlib
import os
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, Final, Generic, TypeVar

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

__all__ = ["OUTAGE", "SETTLED", "Pipe"]

OUTAGE = (RedisConnectionError, RedisTimeoutError, OSError)
"""What a lost connection raises while writing or reading."""
SETTLED: Final = object()
"""``replies``'s reply for a token queued by ``settled``: none was due."""

_T = TypeVar("_T")


class Pipe(Generic[_T]):
    """Writes now, replies later, in order. Not thread-safe: its owner holds a lock."""

    def __init__(self, connect: Callable[[], Any]) -> None:
        self._connect = connect
        """Makes a connected connection (the owner's set-up, such as a script load, done)."""
        self._pid = os.getpid()
        self._connection: Any = None
        self._due: deque[tuple[_T, bool]] = deque()
        """(token, whether a reply is due for it), in the order written."""

    def __len__(self) -> int:
        return len(self._due)

    @property
    def open(self) -> bool:
        """True while the connection is open (in this process)."""
        return self._connection is not None and os.getpid() == self._pid

    def forked(self) -> bool:
        """True (once) in a forked child, which forgets the parent's connection and tokens."""
        if os.getpid() == self._pid:
            return False
        self._pid, self._connection = os.getpid(), None
        self._due.clear()
        return True

    def connection(self) -> Any:
        """The open connection, connected first if none is (raises an outage)."""
        self.forked()
        if self._connection is None:
            self._connection = self._connect()
        return self._connection

    def sent(self, token: _T) -> None:
        """A call was written on ``connection()`` for ``token``: its reply is due."""
        self._due.append((token, True))

    def settled(self, token: _T) -> None:
        """``token`` needs no reply, and is read back in its turn (as ``SETTLED``)."""
        self._due.append((token, False))

    def replies(self, *, block: bool, keep: int = 0, **options: Any) -> Iterator[tuple[_T, Any]]:
        """(token, reply) in order: all but the last ``keep`` (``block``: waiting for
        them) or those already here. A refusal (``ResponseError``) is the reply; an
        outage is raised, the token it took still due (``drop`` hands it back). Tokens
        added meanwhile (a call written again) are read in their turn."""
        while len(self._due) > keep:
            token, due = self._due[0]
            if due:
                connection = self._connection
                if connection is None:
                    return
                if not block and not connection.can_read(timeout=0):
                    return
                try:
                    reply: Any = connection.read_response(**options)
                except ResponseError as refused:
                    reply = refused
            else:
                reply = SETTLED
            self._due.popleft()  # once read: an outage before hands it back
            yield token, reply

    def close(self) -> None:
        """Close the connection (the next ``connection()`` opens one); the tokens stay."""
        if self._connection is not None:
            with contextlib.suppress(*OUTAGE):
                self._connection.disconnect()
        self._connection = None

    def drop(self) -> list[_T]:
        """``close``, and the tokens still queued, forgotten here (their replies, if any
        was due, are lost with the connection)."""
        self.close()
        due, self._due = self._due, deque()
        return [token for token, _ in due]
