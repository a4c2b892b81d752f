"""``asyncbook_result_ref``: what a success records as where Celery keeps its result."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery import Task
from celery.app import trace as celery_trace
from celery.backends.base import DisabledBackend

__all__ = ["ResultRef", "default_result_ref"]

# Quoted: Celery's Task is subscriptable at run time only from 5.7.
ResultRef = Callable[["Task[Any, Any]", str, Any], str]
"""An ``asyncbook_result_ref`` callable: ``(task, task_id, result) -> str``."""


def _result_kept(task: Task[Any, Any]) -> bool:
    """Whether Celery stores the result of the execution running now (as its tracer decides)."""
    request = task.request
    if isinstance(task.backend, DisabledBackend):
        return False
    if request.is_eager and not task.store_eager_result:
        return False
    # Celery 5.6's tracer lets the call's ignore_result override the task's (5.7 moved the
    # function to celery.app.task; trace still imports it); 5.5's reads the task's alone.
    actual: Callable[[Any, Any], bool] | None = getattr(
        celery_trace, "get_actual_ignore_result", None
    )
    ignored = actual(task, request) if actual is not None else task.ignore_result
    # The backend skips a request that asks to ignore its result, whatever the task says.
    return not ignored and not request.ignore_result


def default_result_ref(task: Task[Any, Any], task_id: str, result: Any) -> str:
    """Where Celery keeps the result of ``task_id``; it names a key only where one is written.

    - the result backend's key (``celery-task-meta-<id>``) for a key-value backend
      (Redis, cache, ...);
    - ``celery:<id>`` for a backend without a key per task (database, RPC, ...): read it
      with ``AsyncResult(id)``;
    - ``ignored:<id>`` when Celery keeps no result: ``ignore_result`` (of the task or the
      call), no result backend, or an eager call without ``task_store_eager_result``.
      ``store_errors_even_if_ignored`` stores failures only, so a success stays ignored.
    """
    if not _result_kept(task):
        return f"ignored:{task_id}"
    key_for: Callable[[str], bytes | str] | None = getattr(task.backend, "get_key_for_task", None)
    if key_for is None:
        return f"celery:{task_id}"
    key = key_for(task_id)
    return key.decode() if isinstance(key, bytes) else str(key)
