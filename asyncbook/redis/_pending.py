"""Writes a process made to a book without waiting for them (a publisher's creates,
written and not yet answered, or queued while Redis was down): a ``RedisBook`` of the
same namespace in that process waits for them before it reads or applies, so the process
reads its own writes."""

from __future__ import annotations

import threading
import weakref

from .._book import HeldWrites

__all__ = ["pending", "register", "settle"]

_lock = threading.Lock()
_by_namespace: dict[str, weakref.WeakSet[HeldWrites]] = {}


def register(namespace: str, source: HeldWrites) -> None:
    """Let books of ``namespace`` in this process wait for ``source``."""
    with _lock:
        _by_namespace.setdefault(namespace, weakref.WeakSet()).add(source)


def settle(namespace: str) -> None:
    """Wait for the writes queued for ``namespace`` in this process (none: at once)."""
    for source in list(_by_namespace.get(namespace, ())):
        if source.pending():
            source.flush()


def pending(namespace: str) -> bool:
    """True while writes queued for ``namespace`` in this process wait for an answer."""
    return any(source.pending() for source in list(_by_namespace.get(namespace, ())))
