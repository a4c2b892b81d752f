"""Which ``Integration`` each Celery app has: ``install`` records it, ``installed`` reads it,
``book_of`` hands out its book (``async_book_of``: the same book for asyncio)."""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING

from celery import Celery

from ..errors import invalid
from ..redis import AsyncRedisBook

if TYPE_CHECKING:
    from .._book import AsyncBook
    from ._integration import Integration

__all__ = ["REGISTRY", "Registry", "async_book_of", "book_of", "installed", "require_installed"]


class Registry:
    """The integration of each app (held weakly), and the lock ``install`` and
    ``uninstall`` hold while they change it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._by_app: weakref.WeakKeyDictionary[Celery, Integration] = weakref.WeakKeyDictionary()

    def get(self, app: Celery) -> Integration | None:
        """The integration installed for ``app``, if any."""
        return self._by_app.get(app)

    def put(self, app: Celery, integration: Integration) -> None:
        """Record ``integration`` as ``app``'s."""
        self._by_app[app] = integration

    def pop(self, app: Celery) -> Integration | None:
        """Forget ``app``'s integration; the one it had, if any."""
        return self._by_app.pop(app, None)


REGISTRY = Registry()
"""The integrations ``install`` made, by app."""


def installed(app: Celery) -> Integration | None:
    """The integration installed for ``app``, if any."""
    return REGISTRY.get(app)


def require_installed(app: Celery) -> Integration:
    """The integration installed for ``app``; ``invalid-request`` (field ``app``) if none."""
    integration = REGISTRY.get(app)
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
    twin = book.async_twin()
    if not isinstance(twin, AsyncRedisBook):  # None: the book has none
        raise invalid(
            f"the app's book ({type(book).__name__}) has no asyncio twin: build "
            "AsyncRedisBook.from_url(url, namespace=...) for it",
            field="app",
        )
    return twin
