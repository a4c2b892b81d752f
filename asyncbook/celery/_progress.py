"""``report_progress``: a tracked task says how far it got; ``report_output``: what it
produced so far."""

from __future__ import annotations

from typing import Any

from celery import Task

from .._checks import require_integer, require_string
from .._output import OutputAppend, require_chunks
from ..errors import invalid
from ._registry import installed
from ._tracking import is_tracked

__all__ = ["report_output", "report_progress"]


def report_progress(
    task: Task[Any, Any], percent: int, cursor: str = "", *, task_id: str | None = None
) -> None:
    """Record ``percent`` (0..100) and a resume ``cursor`` for the running attempt.

    Call it from a bound task (``bind=True``) with ``self``. It returns at once: the
    event is written within a few milliseconds, or with the task's result. A task that
    is not tracked, or an app without ``install``, makes it a no-op; so does a call
    when no execution of the task runs in this process.

    From another thread of the task (a helper thread, a thread pool), where
    ``self.request`` is empty, it reports for the execution of ``task`` running in this
    process. When several run at once (a ``threads`` or ``gevent`` pool) it cannot tell
    which is meant and raises ``AsyncBookError`` (``invalid-request``, field
    ``task_id``): pass ``task_id=self.request.id``, read in the task's own thread.
    """
    value = require_integer(percent, "progress")
    if value > 100:
        raise invalid("progress must not exceed 100", field="progress")
    require_string(cursor, "cursor")
    integration = installed(task.app)
    if integration is None or not is_tracked(task):
        return
    if task_id is not None:
        require_string(task_id, "task_id")
    integration.progress(task, value, cursor, task_id)


def report_output(
    task: Task[Any, Any], *chunks: str, task_id: str | None = None
) -> OutputAppend | None:
    """Append ``chunks`` (tokens, partial transcripts, log lines) to the running
    attempt's output stream, labelled with its attempt: one script call per report, so
    batch small chunks into one call where you can. Returns what was stored (the last
    chunk's cursor), or None where ``report_progress`` is a no-op.

    The bounds (``asyncbook._output``: 64 KiB a chunk, 1,000 a call, 8 MiB and 100,000
    chunks a task) raise ``AsyncBookError`` (field ``chunk``) and store nothing. Called
    from another thread it finds the execution as ``report_progress`` does."""
    require_chunks(chunks)
    integration = installed(task.app)
    if integration is None or not is_tracked(task):
        return None
    if task_id is not None:
        require_string(task_id, "task_id")
    return integration.output(task, chunks, task_id)
