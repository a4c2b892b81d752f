"""A revoke, the Celery way, cancels in the book before it is broadcast.

``install(app)`` gives the app a ``Control`` (Celery's ``control_cls``, a subclass of the
app's own) whose ``broadcast`` of ``revoke`` first writes ``cancelled`` to the book for
every id the book holds: ``app.control.revoke(id)``, ``AsyncResult.revoke()``,
``GroupResult.revoke()`` and ``celery control revoke`` all broadcast it, so a queued task
reads ``cancelled`` when the call returns, not only once a worker discards its message.
``uninstall(app)`` gives the app its previous control back.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, ClassVar

from celery import Celery
from celery.app.control import Control
from kombu.utils.imports import symbol_by_name

from .._models import CancelEvent
from ._registry import installed
from ._tracking import callback_id

if TYPE_CHECKING:
    from ._integration import Integration

__all__ = ["BookControl", "cancelled_here", "install_control", "uninstall_control"]

logger = logging.getLogger("asyncbook.celery")

_cancelled_here: ContextVar[frozenset[str]] = ContextVar(
    "asyncbook_cancelled_here", default=frozenset()
)


@contextmanager
def cancelled_here(task_id: str) -> Iterator[None]:
    """While in it, a revoke of ``task_id`` from this thread skips the book: the caller
    (``cancel``) wrote its own cancel, with its reason."""
    token = _cancelled_here.set(_cancelled_here.get() | {task_id})
    try:
        yield
    finally:
        _cancelled_here.reset(token)


def _task_ids(value: object) -> list[str]:
    """The ids a revoke names: one id, or a list of them (as Celery's worker reads it)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple | set | frozenset):
        return [item for item in value if isinstance(item, str)]
    return []


def cancel_in_book(integration: Integration, task_ids: list[str], terminated: bool) -> None:
    """Cancel ``task_ids`` in the book in one round trip ("revoked", or "terminated");
    ids the book does not hold, or holds ended, are left alone. A book that does not
    answer is logged: the worker that discards the message records the cancel then."""
    reason = "terminated" if terminated else "revoked"
    try:
        integration.flush_creates()  # a task this process just published is in the book
        book = integration.book
        event = CancelEvent(at_ms=book.now_ms(), reason=reason)
        items = [(task_id, event, callback_id(task_id, "revoke", reason)) for task_id in task_ids]
        book.apply_many(items, full_task=False)
    except Exception as error:  # the revoke goes out whatever the book answered
        logger.warning(
            "asyncbook: the revoke of %s is not in the book yet (%s); the worker that "
            "discards the message records it",
            ", ".join(task_ids),
            error,
        )


class BookControl(Control):
    """Celery's remote control, with ``revoke`` written to the book first."""

    replaced: ClassVar[Any] = None
    """The app's ``control_cls`` before ``install`` (restored by ``uninstall``)."""

    def broadcast(
        self, command: str, arguments: Mapping[str, Any] | None = None, *args: Any, **kwargs: Any
    ) -> Any:
        """Broadcast ``command``; a ``revoke`` cancels its tasks in the book first."""
        if command == "revoke":
            given = {**(arguments or {}), **kwargs}
            skip = _cancelled_here.get()
            task_ids = [i for i in _task_ids(given.get("task_id")) if i not in skip]
            integration = installed(self.app)
            if task_ids and integration is not None:
                cancel_in_book(integration, task_ids, bool(given.get("terminate")))
        return super().broadcast(command, arguments, *args, **kwargs)


def install_control(app: Celery) -> None:
    """Make the app's control a ``BookControl`` (a subclass of the app's own)."""
    current = app.control_cls
    base = symbol_by_name(current) if isinstance(current, str) else current
    if isinstance(base, type) and issubclass(base, BookControl):
        return
    if not (isinstance(base, type) and issubclass(base, Control)):
        logger.warning(
            "asyncbook: the app's control_cls %r is not a celery Control: revoke() "
            "is recorded in the book only when a worker discards the message",
            current,
        )
        return
    control = type(f"Book{base.__name__}", (BookControl, base), {"replaced": current})
    app.control_cls = control  # type: ignore[assignment]  # Celery takes a class or a path
    del app.control  # built again, as the new class, when next used


def uninstall_control(app: Celery) -> None:
    """Give the app the control it had before ``install_control``."""
    current = app.control_cls
    if isinstance(current, type) and issubclass(current, BookControl):
        app.control_cls = current.replaced
        del app.control
