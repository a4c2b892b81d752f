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
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, ClassVar

from celery import Celery
from celery.app.control import Control
from kombu.utils.imports import symbol_by_name

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


class BookControl(Control):
    """Celery's remote control, with ``revoke`` written to the book first."""

    replaced: ClassVar[Any] = None
    """The app's ``control_cls`` before ``install`` (restored by ``uninstall``)."""
    on_revoke: ClassVar[Callable[[list[str], bool], None] | None] = None
    """Cancels the revoked ids in the book (terminated or not): the integration's."""

    def broadcast(
        self, command: str, arguments: Mapping[str, Any] | None = None, *args: Any, **kwargs: Any
    ) -> Any:
        """Broadcast ``command``; a ``revoke`` cancels its tasks in the book first."""
        if command == "revoke":
            given = {**(arguments or {}), **kwargs}
            skip = _cancelled_here.get()
            task_ids = [i for i in _task_ids(given.get("task_id")) if i not in skip]
            on_revoke = type(self).on_revoke
            if task_ids and on_revoke is not None:
                on_revoke(task_ids, bool(given.get("terminate")))
        return super().broadcast(command, arguments, *args, **kwargs)


def install_control(app: Celery, on_revoke: Callable[[list[str], bool], None]) -> None:
    """Make the app's control a ``BookControl`` (a subclass of the app's own) whose
    revokes go through ``on_revoke`` first."""
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
    attributes = {"replaced": current, "on_revoke": staticmethod(on_revoke)}
    control = type(f"Book{base.__name__}", (BookControl, base), attributes)
    app.control_cls = control  # type: ignore[assignment]  # Celery takes a class or a path
    del app.control  # built again, as the new class, when next used


def uninstall_control(app: Celery) -> None:
    """Give the app the control it had before ``install_control``."""
    current = app.control_cls
    if isinstance(current, type) and issubclass(current, BookControl):
        app.control_cls = current.replaced
        del app.control
