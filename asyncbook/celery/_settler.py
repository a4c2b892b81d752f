"""``Settler``: a daemon thread that reads answers a moment after they were asked for.

The publisher's creates (``_creates``) and the backend's execution writes (``_late``) are
written without waiting, their answers read later; each owner wakes its settler after a
write (``soon``), and the settler, ``delay()`` seconds later, calls ``settle(owner)``
again while that answers True (answers still due). The owner is held weakly: the thread
ends with it, or with the process.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["Settler"]

logger = logging.getLogger("asyncbook.celery")

_O = TypeVar("_O")


class Settler(Generic[_O]):
    """Calls ``settle(owner)`` on a thread of its own, ``delay()`` s after ``soon``."""

    def __init__(
        self, owner: _O, settle: Callable[[_O], bool], delay: Callable[[], float], name: str
    ) -> None:
        self._owner = weakref.ref(owner)
        self._settle = settle
        self._delay = delay
        self._name = name
        self._due = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def soon(self) -> None:
        """Settle a moment from now (the thread started on the first call)."""
        self._due.set()
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                    self._thread.start()

    def _run(self) -> None:
        while True:
            if not self._due.wait(timeout=60.0):
                if self._owner() is None:
                    return
                continue
            time.sleep(self._delay())
            self._due.clear()
            owner = self._owner()
            if owner is None:
                return
            try:
                again = self._settle(owner)
            except Exception:  # the owner's next write or flush reads them
                logger.debug("asyncbook: %s: reading answers failed", self._name, exc_info=True)
                again = False
            if again:
                self._due.set()
            del owner
