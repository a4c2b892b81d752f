"""Which Celery tasks are tracked, and how their Celery facts become book inputs.

Tracking is a task option, in Celery's idiom (Celery keeps unknown options of
``app.task`` as attributes of the task class)::

    @app.task(bind=True, tracked=True, ttl=timedelta(minutes=30), max_retries=2)
    def generate(self, prompt): ...

``ttl`` (a ``timedelta`` or seconds) is the deadline counted from publish; without it the
``asyncbook_default_ttl`` setting applies. ``max_attempts`` defaults to
``max_retries + 1``. A task defined elsewhere is tracked with ``tracked(task, ...)``
(``_tracked``), or by Celery's ``task_annotations``; Celery's own tasks (``celery.*``) and
asyncbook's (``asyncbook.*``) never are.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from celery.utils.serialization import UnpickleableExceptionWrapper
from celery.utils.time import maybe_iso8601, maybe_make_aware

from .._limits import bounded_error
from ..redis import prefix_home
from ._settings import duration_ms

__all__ = [
    "TRACK_OPTIONS",
    "UNLIMITED_ATTEMPTS",
    "callback_id",
    "celery_home",
    "describe_error",
    "error_type_name",
    "expires_ms",
    "heartbeat_timeout_ms",
    "iso_time",
    "is_tracked",
    "max_attempts",
    "now_ms",
    "result_hash",
    "ttl_ms",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)

TRACK_OPTIONS = (
    "tracked", "ttl", "max_retries", "max_attempts", "heartbeat_timeout", "one_run",
    "limit", "concurrency_key",
)  # fmt: skip
"""The task options asyncbook reads (``@app.task(tracked=True, ttl=..., ...)``)."""

UNLIMITED_ATTEMPTS = 2**31 - 1
"""``max_attempts`` of a task whose ``max_retries`` is None (retries forever)."""


_NEVER_TRACKED = ("celery.", "asyncbook.")
"""Name prefixes of Celery's built-in tasks and asyncbook's beat tasks: an annotation for
every task (``{"*": {"tracked": True}}``) leaves them alone."""


def is_tracked(task: object) -> bool:
    """True if the task was declared (or annotated) with ``tracked=True``."""
    if getattr(task, "tracked", False) is not True:
        return False
    name = getattr(task, "name", None)
    return not (isinstance(name, str) and name.startswith(_NEVER_TRACKED))


def ttl_ms(task: object, default_ms: int) -> int:
    """The task's ``ttl`` option in milliseconds, or ``default_ms``."""
    ttl = getattr(task, "ttl", None)
    return default_ms if ttl is None else duration_ms(ttl, "ttl")


def heartbeat_timeout_ms(task: object, default_ms: int) -> int | None:
    """The task's ``heartbeat_timeout`` option in ms (``0``/``False``: not watched), or
    ``default_ms``."""
    timeout = getattr(task, "heartbeat_timeout", None)
    if timeout is None:
        return default_ms
    if timeout is False or timeout == 0:
        return None
    return duration_ms(timeout, "heartbeat_timeout")


def max_attempts(task: object) -> int:
    """The task's ``max_attempts`` option, else ``max_retries + 1``."""
    explicit = getattr(task, "max_attempts", None)
    if isinstance(explicit, int) and explicit >= 1:
        return explicit
    retries = getattr(task, "max_retries", None)
    if retries is None:
        return UNLIMITED_ATTEMPTS
    return int(retries) + 1


_CALLBACK_PREFIX = "celery:"


def callback_id(task_id: str, signal: str, retries: int | str, *extra: object) -> str:
    """The callback id of one signal of one execution: a redelivery repeats it."""
    return ":".join(["celery", task_id, signal, str(retries), *map(str, extra)])


def celery_home(identifier: str) -> str:
    """The home-shard rule of the integration's books (``home_of``): the task id a
    ``callback_id`` names (``celery:<id>:...``), so it is claimed in its task's own shard
    in the apply's one script call; any other id as the generic rule homes it (its
    ``<id>:...`` prefix, else itself)."""
    if identifier.startswith(_CALLBACK_PREFIX):
        head, colon, _tail = identifier[len(_CALLBACK_PREFIX) :].partition(":")
        if colon and head:
            return head
    return prefix_home(identifier)


def error_type_name(error: BaseException) -> str:
    """The name of the exception's type; for Celery's wrapper of an exception that does
    not pickle, the name of the type it wraps."""
    if isinstance(error, UnpickleableExceptionWrapper):
        return str(error.exc_cls_name)
    return type(error).__name__


def describe_error(error: BaseException | None) -> str:
    """An exception as the book records it: ``Type: text`` (``Type`` alone without text),
    capped at ``ERROR_LIMIT`` characters with a marker of what was cut."""
    if error is None:
        return "error"
    if isinstance(error, UnpickleableExceptionWrapper):
        # Celery wraps an exception that does not pickle; while it is being handled, the
        # exception itself is still the one raised.
        raised = sys.exc_info()[1]
        if raised is None or type(raised).__name__ != error.exc_cls_name:
            return _described(str(error.exc_cls_name), _wrapped_text(error))
        error = raised
    return _described(type(error).__name__, str(error))


def _described(name: str, text: str) -> str:
    return bounded_error(f"{name}: {text}" if text else name)


def _wrapped_text(error: UnpickleableExceptionWrapper) -> str:
    """What ``str()`` of the wrapped exception gave, from its (safe) args."""
    args = tuple(error.exc_args or ())
    return "" if not args else str(args[0]) if len(args) == 1 else str(args)


def expires_ms(value: object) -> int | None:
    """A message's ``expires`` header in ms since the epoch (rounded down), read as
    Celery's worker reads it (ISO 8601; a time without an offset is UTC); None when it
    is absent or unreadable.

    Celery turns ``expires`` given as seconds into an aware time before publishing, so
    the header is always a time.
    """
    try:
        moment = maybe_iso8601(value) if isinstance(value, str | datetime) else None
    except (ValueError, TypeError, OverflowError):
        return None
    if moment is None:
        return None
    return (maybe_make_aware(moment) - _EPOCH) // _MS  # exact, rounded down


def iso_time(ms: int | float) -> str:
    """``ms`` since the epoch as an ISO 8601 time in UTC (a message's ``expires``)."""
    return (_EPOCH + timedelta(milliseconds=ms)).isoformat()


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
