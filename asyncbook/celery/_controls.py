"""Lifecycle controls for a Celery user: ``cancel`` a task, read a task's ``last_cursor``,
``apply_group`` (the integration's ``Controls`` backs them)."""

from __future__ import annotations

from typing import Any

from celery import Celery, Task, chord, group
from celery.result import AsyncResult, GroupResult

from .._checks import require_optional_string, require_string
from .._models import CallbackResult
from ..errors import invalid
from ._registry import installed, require_installed
from ._tracking import is_tracked

__all__ = ["apply_group", "cancel", "last_cursor"]


def cancel(
    app: Celery,
    task_id: str,
    reason: str | None = None,
    *,
    terminate: bool = False,
    actor: str | None = None,
) -> CallbackResult:
    """Cancel ``task_id``: ``cancelled`` in the book at once, then revoked in Celery.

    A queued task (or one waiting between retries) is discarded by every worker without
    running; a running one learns of it at its next ``report_progress`` (which raises
    ``TaskCancelled``), or is killed with ``terminate=True``. Returns the book's answer
    (``cancelled``, ``duplicate-cancel``, or ``terminal-conflict`` for a task that
    already ended). With ``actor`` (who asked) the cancel is audited (``book.audit()``).
    """
    require_string(task_id, "task_id")
    require_optional_string(reason, "reason")
    controls = require_installed(app).controls
    return controls.cancel(task_id, reason, terminate=terminate, actor=actor)


def last_cursor(task: Task[Any, Any]) -> str | None:
    """Inside a tracked task: the cursor it last reported, in an earlier attempt or this
    one (its checkpoint), or None when it never reported one. One round trip."""
    integration = installed(task.app)
    return None if integration is None else integration.controls.last_cursor(task)


def apply_group(
    signature: group | chord, *args: Any, **options: Any
) -> GroupResult | AsyncResult[Any]:
    """Publish a Celery ``group`` (or a ``chord``, whose header is the group) and declare
    its size to the book first, so the book sends one group notification when the last
    tracked member ends. Returns what ``signature.apply_async`` returns.

    Members are recorded at publish by any ``group.apply_async()``; only the size needs
    this call, because Celery's publish hooks do not carry it.
    """
    app = signature.app
    integration = require_installed(app)
    if not isinstance(signature, group | chord):
        raise invalid("apply_group takes a group or a chord", field="signature")
    signature.freeze()  # fixes the group's id and its members' ids, as apply_async uses them
    header = signature.tasks if isinstance(signature, chord) else signature
    if not isinstance(header, group):
        raise invalid("apply_group takes a group or a chord", field="signature")
    members = [app.tasks.get(str(member.task)) for member in header.tasks]
    tracked = sum(1 for task in members if task is not None and is_tracked(task))
    if tracked and header.id is not None:
        integration.book.seal_group(str(header.id), tracked)
    return signature.apply_async(args, **options)
