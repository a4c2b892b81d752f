"""Tracking a task without editing its definition: ``tracked(task, ...)`` for one task
object, ``TrackTasks(pattern, ...)`` for Celery's ``task_annotations``.

Both set the options ``@app.task(tracked=True, ...)`` would (``tracked``, ``ttl``,
``max_retries``, ``max_attempts``, ``heartbeat_timeout``, ``one_run``) on the task, which is where
the integration reads them. Apply them where both the publisher and the worker import
them (the module that makes the app, for instance).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypedDict, TypeVar, Unpack, overload

from celery import Task
from celery.local import PromiseProxy, Proxy

from .._checks import require_integer
from ..errors import invalid
from ._settings import duration_ms

__all__ = ["TrackTasks", "tracked"]

_T = TypeVar("_T")
_UNSET: Any = object()

Duration = timedelta | int | float


class TrackOptions(TypedDict, total=False):
    """The options ``tracked`` takes (each left out keeps the task's own)."""

    ttl: Duration | None
    max_retries: int | None
    max_attempts: int | None
    heartbeat_timeout: Duration | bool | None
    one_run: bool | None
    limit: int | None
    concurrency_key: Callable[..., str] | None


def _options(
    ttl: Duration | None,
    max_retries: int | None,
    max_attempts: int | None,
    heartbeat_timeout: Duration | bool | None,
    one_run: bool | None = None,
    limit: int | None = None,
    concurrency_key: Callable[..., str] | None = None,
) -> dict[str, Any]:
    """The task options to set, checked (a bad one names its field)."""
    options: dict[str, Any] = {"tracked": True}
    if ttl is not None:
        duration_ms(ttl, "ttl")
        options["ttl"] = ttl
    if max_retries is not _UNSET:  # None: retry forever, as in Celery
        options["max_retries"] = (
            None if max_retries is None else require_integer(max_retries, "max_retries")
        )
    if max_attempts is not None:
        options["max_attempts"] = require_integer(max_attempts, "max_attempts", 1)
    if heartbeat_timeout is not None:
        if heartbeat_timeout is not False and heartbeat_timeout != 0:
            duration_ms(heartbeat_timeout, "heartbeat_timeout")
        options["heartbeat_timeout"] = heartbeat_timeout
    if one_run is not None:
        if not isinstance(one_run, bool):
            raise invalid("one_run must be True or False", field="one_run")
        options["one_run"] = one_run
    if limit is not None:
        options["limit"] = require_integer(limit, "limit", 1)
    if concurrency_key is not None:
        if not callable(concurrency_key):
            raise invalid(
                "concurrency_key must be a callable of the task's arguments",
                field="concurrency_key",
            )
        if limit is None:
            raise invalid("concurrency_key needs a limit", field="limit")
        options["concurrency_key"] = concurrency_key
    return options


def _set(target: object, options: dict[str, Any]) -> None:
    if not isinstance(target, Task):
        raise invalid(
            f"tracked() takes a Celery task, not {type(target).__name__} "
            "(put @tracked above @app.task)",
            field="task",
        )
    for name, value in options.items():
        setattr(target, name, value)


def _track(task: _T, options: dict[str, Any]) -> _T:
    if isinstance(task, PromiseProxy) and not task.__evaluated__():
        # @app.task before the app is finalized: set them when Celery makes the task,
        # without making it early (it would read the app's configuration too soon).
        task.__then__(lambda: _set(task._get_current_object(), options))
    elif isinstance(task, Proxy):  # @shared_task: the current app's task
        _set(task._get_current_object(), options)
    else:
        _set(task, options)
    return task


@overload
def tracked(
    task: _T,
    /,
    *,
    ttl: Duration | None = None,
    max_retries: int | None = _UNSET,
    max_attempts: int | None = None,
    heartbeat_timeout: Duration | bool | None = None,
    one_run: bool | None = None,
    limit: int | None = None,
    concurrency_key: Callable[..., str] | None = None,
) -> _T: ...
@overload
def tracked(task: None = None, /, **options: Unpack[TrackOptions]) -> Callable[[_T], _T]: ...
def tracked(
    task: Any = None,
    /,
    *,
    ttl: Duration | None = None,
    max_retries: int | None = _UNSET,
    max_attempts: int | None = None,
    heartbeat_timeout: Duration | bool | None = None,
    one_run: bool | None = None,
    limit: int | None = None,
    concurrency_key: Callable[..., str] | None = None,
) -> Any:
    """Track an existing task, as ``@app.task(tracked=True, ...)`` would; returns it.

    Stacked above ``@app.task`` (``@tracked`` or ``@tracked(ttl=...)``), or called on a
    task of another package: ``tracked(thirdparty.tasks.resize, ttl=600)``. Options left
    out keep the task's own (``max_retries`` included); ``ttl`` and ``heartbeat_timeout``
    take a ``timedelta`` or seconds; ``one_run=False`` lets a second delivery run beside
    a live one (docs/one-run.md); ``limit`` (and ``concurrency_key``, a callable of the
    task's args and kwargs) bounds its running attempts per key across workers
    (docs/limits.md).
    """
    options = _options(
        ttl, max_retries, max_attempts, heartbeat_timeout, one_run, limit, concurrency_key
    )
    if task is None:
        return lambda given: _track(given, options)
    return _track(task, options)


class TrackTasks:
    """A ``task_annotations`` entry tracking every task whose name matches a glob::

        task_annotations = [TrackTasks("proj.media.*", ttl=600)]

    Celery's own annotations track by name too: ``{"proj.media.resize": {"tracked":
    True, "ttl": 600}}``, or every task with ``{"*": {"tracked": True}}``.
    """

    def __init__(
        self,
        *patterns: str,
        ttl: Duration | None = None,
        max_retries: int | None = _UNSET,
        max_attempts: int | None = None,
        heartbeat_timeout: Duration | bool | None = None,
        one_run: bool | None = None,
        limit: int | None = None,
        concurrency_key: Callable[..., str] | None = None,
    ) -> None:
        if not patterns or not all(isinstance(p, str) and p for p in patterns):
            raise invalid("TrackTasks takes one or more task name patterns", field="patterns")
        self.patterns = patterns
        self.options = _options(
            ttl, max_retries, max_attempts, heartbeat_timeout, one_run, limit, concurrency_key
        )

    def annotate(self, task: Any) -> dict[str, Any] | None:
        """The options for ``task`` when its name matches (Celery's annotation hook)."""
        name = getattr(task, "name", None)
        if isinstance(name, str) and any(fnmatch.fnmatchcase(name, p) for p in self.patterns):
            return dict(self.options)
        return None

    def __repr__(self) -> str:
        patterns = ", ".join(repr(pattern) for pattern in self.patterns)
        return f"TrackTasks({patterns}, options={self.options!r})"
