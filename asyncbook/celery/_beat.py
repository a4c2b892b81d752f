"""The beat tasks' (``asyncbook.sweep``, ``asyncbook.deliver``, registered by ``install``)
entries on beat's schedule, and the router that sends them to the ``asyncbook_queue``.

They back up the sweep and delivery every worker runs in its main process (``_upkeep``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from celery import Celery

__all__ = [
    "BEAT_TASKS",
    "BeatRouter",
    "add_schedule",
    "is_configured",
    "listed_routes",
    "missing_entries",
    "remove_schedule",
    "schedule_in",
]

BEAT_TASKS = ("asyncbook.sweep", "asyncbook.deliver")
"""The tasks ``install`` registers; they are routed to the ``asyncbook_queue``."""


class BeatRouter:
    """The router ``install`` appends to ``task_routes``: the beat tasks go to their queue.

    It comes after the app's own routes, so a route of yours for them wins.
    """

    def __init__(self, queue: Callable[[], str | None]) -> None:
        self._queue = queue

    def __call__(
        self, name: str, args: Any, kwargs: Any, options: Any, task: Any = None, **_: Any
    ) -> dict[str, str] | None:
        queue = self._queue() if name in BEAT_TASKS else None
        return None if queue is None else {"queue": queue}


def is_configured(app: Celery) -> bool:
    """Whether ``app`` has read its configuration (so ``app.conf`` may be looked at)."""
    # Reading app.conf would finalize a pending configuration: look only once it is read.
    return bool(getattr(app, "configured", False))


def listed_routes(value: Any) -> list[Any]:
    """``task_routes`` as a list: None is no route, a single route a list of one."""
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]


def _entry(task_name: str) -> dict[str, Any]:
    # Every second; a message that waited 5 s is stale (the next one is on its way).
    return {"task": task_name, "schedule": 1.0, "options": {"expires": 5.0}}


def missing_entries(schedule: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The beat tasks' entries a schedule lacks: none for a task one of its entries
    (a dict of ``beat_schedule``, or a scheduler's entry) already runs."""
    scheduled = {
        entry.get("task") if isinstance(entry, dict) else getattr(entry, "task", None)
        for entry in schedule.values()
    }
    return {
        task_name.replace(".", "-"): _entry(task_name)
        for task_name in BEAT_TASKS
        if task_name not in scheduled and task_name.replace(".", "-") not in schedule
    }


def add_schedule(conf: Any) -> dict[str, dict[str, Any]]:
    """Put each beat task on ``conf.beat_schedule`` unless an entry of the user's runs it
    (that one wins); returns the entries added, by name."""
    schedule = dict(conf.beat_schedule or {})
    added = missing_entries(schedule)
    if added:
        conf.beat_schedule = {**schedule, **added}
    return added


def schedule_in(scheduler: Any) -> None:
    """Beat starts: add the beat tasks' entries its scheduler still lacks (the app's
    ``beat_schedule`` was replaced after ``install`` added them, or a scheduler of its own
    reads another schedule)."""
    missing = missing_entries(scheduler.schedule)
    if missing:
        scheduler.update_from_dict(missing)


def remove_schedule(conf: Any, added: dict[str, dict[str, Any]]) -> None:
    """Take the entries ``add_schedule`` added off ``conf.beat_schedule`` again."""
    schedule = dict(conf.beat_schedule or {})
    mine = [key for key, entry in added.items() if schedule.get(key) is entry]
    if mine:
        conf.beat_schedule = {k: v for k, v in schedule.items() if k not in mine}
