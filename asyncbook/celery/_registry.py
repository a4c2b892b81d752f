"""``install(app)`` and ``uninstall(app)``: which ``Integration`` each Celery app has.

``install`` connects one (``Integration.connect``) and records it, ``uninstall``
disconnects it; ``installed`` reads it, ``book_of`` hands out its book (``async_book_of``:
the same book for asyncio), and the beat tasks find theirs here.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, cast

from celery import Celery, Task

from .._book import AsyncBook
from ..errors import invalid
from ..redis import AsyncRedisBook
from ._integration import Integration

__all__ = [
    "async_book_of",
    "book_of",
    "deliver_task",
    "install",
    "installed",
    "require_installed",
    "sweep_task",
    "uninstall",
]


_installed: weakref.WeakKeyDictionary[Celery, Integration] = weakref.WeakKeyDictionary()
_install_lock = threading.Lock()


def install(app: Celery, book: AsyncBook | None = None) -> Integration:
    """Connect asyncbook's signal handlers for ``app``, once; returns the integration.

    ``book`` defaults to a ``RedisBook`` on ``asyncbook_redis_url`` (the broker URL when
    the broker is Redis), built on first use. Settings are read when first needed, so
    the app may be configured before or after. Installing again with another book
    replaces the previous integration.
    """
    with _install_lock:
        current = _installed.get(app)
        if current is not None:
            if book is None or book is current.given_book:
                return current
            current.disconnect()
        integration = Integration(app, book)
        integration.connect({"asyncbook.sweep": sweep_task, "asyncbook.deliver": deliver_task})
        _installed[app] = integration
        return integration


def uninstall(app: Celery) -> None:
    """Disconnect what ``install`` connected for ``app`` (tests, reconfiguration)."""
    with _install_lock:
        current = _installed.pop(app, None)
    if current is not None:
        current.disconnect()


def sweep_task(task: Task[Any, Any]) -> int:
    """``asyncbook.sweep``: expire every task whose deadline has passed."""
    current = installed(task.app)
    return 0 if current is None else current.sweep().expired


def deliver_task(task: Task[Any, Any]) -> int:
    """``asyncbook.deliver``: hand pending notifications to the sinks."""
    current = installed(task.app)
    return 0 if current is None else current.deliver().delivered


def installed(app: Celery) -> Integration | None:
    """The integration installed for ``app``, if any."""
    return _installed.get(app)


def require_installed(app: Celery) -> Integration:
    """The integration installed for ``app``; ``invalid-request`` (field ``app``) if none."""
    integration = _installed.get(app)
    if integration is None:
        raise invalid(
            "asyncbook is not installed on this app: call install(app) first", field="app"
        )
    return integration


def book_of(app: Celery) -> AsyncBook:
    """The book ``install(app)`` writes to, to read it elsewhere (a web endpoint, a
    script) without repeating its URL and namespace. Built from the app's settings on
    first use; ``AsyncBookError`` (``invalid-request``, field ``app``) if the app has no
    ``install``."""
    return require_installed(app).book


def async_book_of(app: Celery) -> AsyncRedisBook:
    """An ``AsyncRedisBook`` on the book ``install(app)`` writes to (same server, db,
    credentials and namespace), for an asyncio app such as a FastAPI endpoint; each call
    makes a new one, to close (``aclose`` or ``async with``) when done.
    ``AsyncBookError`` (field ``app``) if the app has no ``install`` or its book has no
    asyncio twin (a ``MemoryBook``; a ``RedisBook`` has one on every client: plain, TLS or
    unix-socket Redis, Cluster, Sentinel, fakeredis). A sharded book's is sharded alike."""
    book = book_of(app)
    twin = book.async_twin()
    if twin is None:
        raise invalid(
            f"the app's book ({type(book).__name__}) has no asyncio twin: build "
            "AsyncRedisBook.from_url(url, namespace=...) for it",
            field="app",
        )
    return cast(AsyncRedisBook, twin)  # a Redis book's twin (``AsyncBook.async_twin``)
