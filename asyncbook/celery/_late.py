"""``LateWrites``: a worker process's execution writes whose answers are read later.

asyncbook's result backend writes an early-acked execution's events and meta in one
script call that it does not wait for (``EventsScript.sender``): the call is written to a
connection of its own at once, in order, and its answer is read later: before the next
such write is sent (those already here; the oldest waited for once ``MAX_UNREAD`` wait),
by a thread ``READ_AFTER`` seconds after a write, when the worker (or the process) stops
(``flush_all``), and before the backend reads a key or a book of the namespace in the
process reads or writes (read-your-writes: ``AsyncBook.wait_for_writes``). Each answer is
handed to the backend's handler as the synchronous write's would be; one a lost
connection took is handed over as that outage, and the handler writes it again (callback
ids make the events' resend safe; the meta is the same meta).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from .._book import EventsScript, ScriptedSending, ScriptedWrite
from ._settler import Settler

__all__ = ["MAX_UNREAD", "READ_AFTER", "LateWrites", "flush_all"]

logger = logging.getLogger("asyncbook.celery")

MAX_UNREAD = 64
"""Writes whose answers are not yet read before a write waits for the oldest."""
READ_AFTER = 0.05
"""Seconds after a write that the reader thread reads the answers already here."""
_open: weakref.WeakSet[LateWrites] = weakref.WeakSet()


class LateWrites:
    """The writes of one backend in this process that were sent and not yet answered."""

    def __init__(self, handle: Callable[[Any, Any], object]) -> None:
        self.handle = handle
        """Called with a write's token and its answer (in the thread that read it)."""
        self._reset()
        _open.add(self)

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._senders: dict[int, tuple[EventsScript, ScriptedSending | None]] = {}
        self._reader = Settler(
            self, LateWrites._read_due, lambda: READ_AFTER, "asyncbook-late-writes"
        )
        self._owner = 0
        """The thread holding ``_lock`` (its handler's reads must not settle again)."""

    def send(self, fused: EventsScript, write: ScriptedWrite, token: Any) -> bool:
        """Send ``write`` without waiting; False when it was not (no sender for ``fused``,
        or an outage): the caller writes it and waits. Answers already here are handled
        first, and the oldest waited for when ``MAX_UNREAD`` are unread."""
        if os.getpid() != self._pid:  # a forked child: the parent's connection is not ours
            self._reset()
        with self._lock, self._held():
            known = self._senders.get(id(fused))
            if known is None or known[0] is not fused:
                known = self._senders[id(fused)] = (fused, fused.sender())
            sender = known[1]
            if sender is None:
                return False
            if len(sender):
                self._handle(sender.read(block=False))
                if len(sender) >= MAX_UNREAD:
                    self._handle(sender.read(block=True, keep=MAX_UNREAD - 1))
            if not sender.send(write, token):
                self._handle(sender.read(block=False))  # lost: written again, in order
                return False
        self._reader.soon()
        return True

    def pending(self) -> bool:
        """True while answers are unread."""
        senders = list(self._senders.values())  # another thread may add one meanwhile
        return any(sender is not None and len(sender) for _, sender in senders)

    def settle(self, *, block: bool = False) -> None:
        """Handle the answers already here (``block``: all of them, waiting); nothing
        when called from a handler (its thread holds them)."""
        if os.getpid() != self._pid or not self.pending():
            return
        if self._owner == threading.get_ident():
            return
        with self._lock, self._held():
            for _fused, sender in list(self._senders.values()):
                if sender is not None and len(sender):
                    self._handle(sender.read(block=block))

    def flush(self, timeout: float | None = None) -> bool:
        """``settle(block=True)`` (``HeldWrites``: a book of the namespace reads after it);
        True once nothing is unread. ``timeout`` is the connection's own: an answer is
        waited for as a synchronous write's would be."""
        self.settle(block=True)
        return not self.pending()

    def _read_due(self) -> bool:
        """The reader's turn (``READ_AFTER`` after a write): the answers already here;
        True while more are due."""
        self.settle()
        return self.pending()

    @contextlib.contextmanager
    def _held(self) -> Iterator[None]:
        self._owner = threading.get_ident()
        try:
            yield
        finally:
            self._owner = 0

    def _handle(self, answered: list[tuple[Any, Any]]) -> None:
        for token, answer in answered:
            try:
                self.handle(token, answer)
            except Exception:  # its task's own write failed: the others are still handled
                logger.exception("asyncbook: handling a result write's answer failed")


def flush_all() -> None:
    """Handle every answer still unread in this process (a worker stops, it exits)."""
    for late in list(_open):
        late.settle(block=True)


atexit.register(flush_all)
