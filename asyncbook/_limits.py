"""Bounds on what a task may store: its id, and the error text the Celery integration
records (docs/spec.md, "Limits").

The reference bounds neither. A task id is capped on every book (``TASK_ID_LIMIT``): an
id is a key of every index, page and notification, and no caller needs a longer one. An
error is capped where the Celery integration forms it from an exception
(``bounded_error``); an error given to a book directly is stored as given, as the
reference stores it.
"""

from __future__ import annotations

from typing import Any

from .errors import invalid

__all__ = ["ERROR_LIMIT", "TASK_ID_LIMIT", "bounded_error", "require_task_id_length"]

TASK_ID_LIMIT = 4096
"""The longest task id a book accepts, in characters (code points): over a hundred
times a Celery UUID's 36, room for any scheme of prefixes, paths and hashes."""

ERROR_LIMIT = 4096
"""The longest error the Celery integration records, in characters, the marker of what
was cut included (as a traceback is capped at ``TEXT_LIMIT``)."""


def require_task_id_length(task_id: Any, field: str = "taskId") -> None:
    """Raise ``invalid-request`` naming ``field`` for a string id over ``TASK_ID_LIMIT``
    characters (what is not a string is left to the caller's own check)."""
    if isinstance(task_id, str) and len(task_id) > TASK_ID_LIMIT:
        raise invalid(
            f"{field} must be at most {TASK_ID_LIMIT} characters (it has {len(task_id)})",
            field=field,
        )


def bounded_error(text: str, limit: int = ERROR_LIMIT) -> str:
    """``text`` if it has at most ``limit`` characters; else its start and a marker of
    how much was cut, ``limit`` characters in all: ``…[cut 1995904 characters]``."""
    if len(text) <= limit:
        return text
    # The marker's length depends on the count it names: at most len(str(len(text))).
    marker = f"…[cut {len(text)} characters]"
    kept = max(0, limit - len(marker))
    marker = f"…[cut {len(text) - kept} characters]"
    return text[:kept] + marker
