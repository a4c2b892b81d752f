"""Which ``Integration`` each Celery app has: ``install`` records it, ``installed`` reads it,
``book_of`` hands out its book (``async_book_of``: the same book for asyncio)."""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING

from celery import Celery

from ..errors import invalid
from ..redis import AsyncRedisBook, RedisBook

if TYPE_CHECKING:
    from .._book import AsyncBook
    from ._integration import Integration

__all__ = ["async_book_of", "book_of", "installed", "require_installed"]

_installed: weakref.WeakKeyDictionary[Celery, Integration] = weakref.WeakKeyDictionary()
_install_lock = threading.Lock()


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
    ``AsyncBookError`` (field ``app``) if the app has no ``install`` or its book is not a
    ``RedisBook`` on a plain, TLS or unix-socket Redis (Cluster and Sentinel: build
    ``AsyncRedisBook.from_url`` with your URL and namespace)."""
    book = book_of(app)
    twin = AsyncRedisBook.twin_of(book) if isinstance(book, RedisBook) else None
    if twin is None:
        raise invalid(
            f"the app's book ({type(book).__name__}) has no asyncio twin: build "
            "AsyncRedisBook.from_url(url, namespace=...) for it",
            field="app",
        )
    return twin
