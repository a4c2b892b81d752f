"""Which ``Integration`` each Celery app has: ``install`` records it, ``installed`` reads it,
``book_of`` hands out its book."""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING

from celery import Celery

from ..errors import invalid

if TYPE_CHECKING:
    from .._book import AsyncBook
    from ._integration import Integration

__all__ = ["book_of", "installed", "require_installed"]

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
