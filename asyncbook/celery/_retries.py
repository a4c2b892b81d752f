"""What a retry was asked for with: the exception given to ``Task.retry``.

``Task.retry`` publishes the next attempt before ``task_retry`` fires, and asyncbook
records the failed attempt at that publish (or the next attempt could start first). At
that moment the exception given as ``exc=`` is only an argument of the ``retry`` call
on the stack: outside an ``except`` block nothing else holds it.
"""

from __future__ import annotations

import inspect
import sys

from celery import Task

__all__ = ["retry_reason"]

_RETRY_CODE = Task.retry.__code__


def retry_reason() -> BaseException | None:
    """The ``exc`` of the ``Task.retry`` call this thread is in (an override that calls
    ``super().retry`` included), else the exception being handled, else None."""
    frame = inspect.currentframe()
    while frame is not None:
        if frame.f_code is _RETRY_CODE:
            given = frame.f_locals.get("exc")
            if isinstance(given, BaseException):
                return given
            break
        frame = frame.f_back
    return sys.exc_info()[1]
