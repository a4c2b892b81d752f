"""Task URLs: ``/api/tasks/<id>[/events|/stream|/delivery]`` read from the raw path.

A task id may hold ``/``, ``%``, spaces or any Unicode, so it travels percent-encoded
(``encodeURIComponent``). Routing on the decoded path would confuse the id ``a/events``
with the events of ``a``; here the raw path is split first and each piece decoded after,
so ``a%2Fevents`` is one id. An unencoded ``/`` inside an id still works when the
remainder does not end in a known suffix.
"""

from __future__ import annotations

from urllib.parse import quote, unquote_to_bytes

from ..errors import invalid

__all__ = ["SUFFIXES", "TASKS_PREFIX", "split_task_path", "task_path"]

TASKS_PREFIX = "/api/tasks/"
SUFFIXES = frozenset({"events", "stream", "delivery"})


def _decode(raw: str) -> str:
    try:
        return unquote_to_bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        raise invalid("task id must be UTF-8 once percent-decoded", field="taskId") from None


def split_task_path(raw_path: bytes) -> tuple[str, str | None]:
    """``(task id, suffix or None)`` from the raw request path under ``/api/tasks/``."""
    text = raw_path.split(b"?", 1)[0].decode("latin-1")
    rest = text[len(TASKS_PREFIX) :]
    parts = rest.split("/")
    suffix = None
    if len(parts) > 1 and parts[-1] in SUFFIXES:
        suffix = parts.pop()
    task_id = "/".join(_decode(part) for part in parts)
    if not task_id:
        raise invalid("task id must not be empty", field="taskId")
    return task_id, suffix


def task_path(task_id: str, suffix: str | None = None) -> str:
    """The URL path for a task (and one of its suffixes), id percent-encoded."""
    path = TASKS_PREFIX + quote(task_id, safe="")
    return f"{path}/{suffix}" if suffix else path
