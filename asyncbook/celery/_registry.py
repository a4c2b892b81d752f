"""Which ``Integration`` each Celery app has: ``install`` records it, ``installed`` reads it."""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING

from celery import Celery

if TYPE_CHECKING:
    from ._integration import Integration

__all__ = ["installed"]

_installed: weakref.WeakKeyDictionary[Celery, Integration] = weakref.WeakKeyDictionary()
_install_lock = threading.Lock()


def installed(app: Celery) -> Integration | None:
    """The integration installed for ``app``, if any."""
    return _installed.get(app)
