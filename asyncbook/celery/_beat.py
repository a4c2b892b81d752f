"""The beat tasks ``install`` registers (``asyncbook.sweep``, ``asyncbook.deliver``) and
the router that sends them to the ``asyncbook_queue``."""

from __future__ import annotations

import weakref
from typing import Any

from celery import Celery, Task

from ._registry import installed

__all__ = [
    "BEAT_TASKS",
    "BeatRouter",
    "deliver_task",
    "is_configured",
    "listed_routes",
    "sweep_task",
]

BEAT_TASKS = ("asyncbook.sweep", "asyncbook.deliver")
"""The tasks ``install`` registers; they are routed to the ``asyncbook_queue``."""


class BeatRouter:
    """The router ``install`` appends to ``task_routes``: the beat tasks go to their queue.

    It comes after the app's own routes, so a route of yours for them wins.
    """

    def __init__(self, app: Celery) -> None:
        self._app = weakref.ref(app)

    def __call__(
        self, name: str, args: Any, kwargs: Any, options: Any, task: Any = None, **_: Any
    ) -> dict[str, str] | None:
        app = self._app()
        integration = None if app is None else installed(app)
        if integration is None or name not in BEAT_TASKS:
            return None
        return {"queue": integration.settings.queue}


def is_configured(app: Celery) -> bool:
    """Whether ``app`` has read its configuration (so ``app.conf`` may be looked at)."""
    # Reading app.conf would finalize a pending configuration: look only once it is read.
    return bool(getattr(app, "configured", False))


def listed_routes(value: Any) -> list[Any]:
    """``task_routes`` as a list: None is no route, a single route a list of one."""
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]


def sweep_task(task: Task[Any, Any]) -> int:
    """``asyncbook.sweep``: expire every task whose deadline has passed."""
    current = installed(task.app)
    return 0 if current is None else current.sweep().expired


def deliver_task(task: Task[Any, Any]) -> int:
    """``asyncbook.deliver``: hand pending notifications to the configured sinks."""
    current = installed(task.app)
    return 0 if current is None else current.deliver().delivered
