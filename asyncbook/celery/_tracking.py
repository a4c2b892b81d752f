"""Which Celery tasks are tracked, and how their Celery facts become book inputs.

Tracking is a task option, in Celery's idiom (Celery keeps unknown options of
``app.task`` as attributes of the task class)::

    @app.task(bind=True, tracked=True, ttl=timedelta(minutes=30), max_retries=2)
    def generate(self, prompt): ...

``ttl`` (a ``timedelta`` or seconds) is the deadline counted from publish; without it the
``asyncbook_default_ttl`` setting applies. ``max_attempts`` defaults to
``max_retries + 1``.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from ._settings import duration_ms

__all__ = [
    "UNLIMITED_ATTEMPTS",
    "callback_id",
    "is_tracked",
    "max_attempts",
    "now_ms",
    "result_hash",
    "ttl_ms",
]

UNLIMITED_ATTEMPTS = 2**31 - 1
"""``max_attempts`` of a task whose ``max_retries`` is None (retries forever)."""


def is_tracked(task: object) -> bool:
    """True if the task was declared with ``tracked=True``."""
    return getattr(task, "tracked", False) is True


def ttl_ms(task: object, default_ms: int) -> int:
    """The task's ``ttl`` option in milliseconds, or ``default_ms``."""
    ttl = getattr(task, "ttl", None)
    return default_ms if ttl is None else duration_ms(ttl, "ttl")


def max_attempts(task: object) -> int:
    """The task's ``max_attempts`` option, else ``max_retries + 1``."""
    explicit = getattr(task, "max_attempts", None)
    if isinstance(explicit, int) and explicit >= 1:
        return explicit
    retries = getattr(task, "max_retries", None)
    if retries is None:
        return UNLIMITED_ATTEMPTS
    return int(retries) + 1


def callback_id(task_id: str, signal: str, retries: int | str, *extra: object) -> str:
    """The callback id of one signal of one execution: a redelivery repeats it."""
    return ":".join(["celery", task_id, signal, str(retries), *(str(part) for part in extra)])


def now_ms() -> int:
    """This machine's clock, in milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


def result_hash(value: Any) -> str:
    """``sha256:<hex>`` of the canonical JSON of ``value`` (sorted keys, no spaces).

    A value JSON cannot hold is hashed through its ``repr``.
    """
    try:
        text = json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    except (TypeError, ValueError):
        text = repr(value)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()
