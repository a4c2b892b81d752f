"""``asyncbook_result_ref``: what a success records as where Celery keeps its result."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery import Task
from celery.app import task as celery_task
from celery.backends.base import DisabledBackend

__all__ = ["ResultRef", "default_result_ref"]

ResultRef = Callable[[Task[Any, Any], str, Any], str]
"""An ``asyncbook_result_ref`` callable: ``(task, task_id, result) -> str``."""


def _result_kept(task: Task[Any, Any]) -> bool:
    """Whether Celery stores the result of the execution running now (as its tracer decides)."""
    request = task.request
    if isinstance(task.backend, DisabledBackend):
        return False
    if request.is_eager and not task.store_eager_result:
        return False
    actual: Callable[[Any, Any], bool] | None = getattr(
        celery_task, "get_actual_ignore_result", None
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
