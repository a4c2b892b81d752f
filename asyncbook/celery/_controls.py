"""Lifecycle controls for a Celery user: ``cancel`` a task, read a task's ``last_cursor``."""

from __future__ import annotations

from typing import Any

from celery import Celery, Task

from .._checks import require_optional_string, require_string
from .._models import CallbackResult
from ..errors import invalid
from ._integration import Integration, installed

__all__ = ["cancel", "last_cursor"]


def _integration(app: Celery) -> Integration:
    integration = installed(app)
    if integration is None:
        raise invalid(
            "asyncbook is not installed on this app: call install(app) first", field="app"
        )
    return integration


def cancel(
    app: Celery, task_id: str, reason: str | None = None, *, terminate: bool = False
) -> CallbackResult:
    """Cancel ``task_id``: ``cancelled`` in the book at once, then revoked in Celery.

    A queued task (or one waiting between retries) is discarded by every worker without
    running; a running one learns of it at its next ``report_progress`` (which raises
    ``TaskCancelled``), or is killed with ``terminate=True``. Returns the book's answer
    (``cancelled``, ``duplicate-cancel``, or ``terminal-conflict`` for a task that
    already ended).
    """
    require_string(task_id, "task_id")
    require_optional_string(reason, "reason")
    return _integration(app).cancel(task_id, reason, terminate=terminate)


def last_cursor(task: Task[Any, Any]) -> str | None:
    """Inside a tracked task: the cursor it last reported, in an earlier attempt or this
    one (its checkpoint), or None when it never reported one. One round trip."""
    integration = installed(task.app)
    return None if integration is None else integration.last_cursor(task)
