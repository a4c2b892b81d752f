"""Task URLs: ``/api/tasks/<id>[/events|/stream|/delivery|/cancel]``, matched and split on
the raw path.

A task id may hold ``/``, ``%``, spaces, newlines or any Unicode, so it travels
percent-encoded (``encodeURIComponent``). Routing on the decoded path would confuse the id
``a/events`` with the events of ``a``, and a pattern on the decoded path stops at a
newline. So the task routes are matched here, on the raw path, and the same split serves
both matching and reading the id: the prefix segments are compared once percent-decoded
(``/api/ta%73ks/ID`` is ID's URL, ``/api/tasks%2FID`` is nobody's), then each remaining
segment is decoded, so ``a%2Fevents`` is one id. An unencoded ``/`` inside an id still
works when the remainder does not end in a known suffix.

Clients remove ``.`` and ``..`` segments from a URL before sending it, so those two ids
are written ``%2E`` and ``%2E%2E``. Browsers remove those too (the WHATWG URL standard
counts ``%2E`` as a dot), so for them the id may travel in the query instead, after an
empty id segment: ``/api/tasks//stream?id=..`` (the page does so).
"""

from __future__ import annotations

from urllib.parse import quote, unquote, unquote_to_bytes

from starlette.types import Scope

from ..errors import invalid

__all__ = [
    "SUFFIXES",
    "TASKS_PREFIX",
    "raw_path",
    "split_task_path",
    "task_path",
    "tasks_remainder",
]

TASKS_PREFIX = "/api/tasks/"
SUFFIXES = frozenset({"events", "stream", "delivery", "cancel"})
_PREFIX_SEGMENTS = ["", "api", "tasks"]
_DOT_SEGMENTS = {".": "%2E", "..": "%2E%2E"}


def raw_path(scope: Scope) -> bytes:
    """The request path as the client sent it (percent-encoded), without the query."""
    raw = scope.get("raw_path")
    if raw is None:
        raw = quote(scope["path"]).encode("ascii")
    return bytes(raw).split(b"?", 1)[0]


def tasks_remainder(path: bytes) -> str | None:
    """The raw text after ``/api/tasks/``, or None when ``path`` is not under it."""
    parts = path.split(b"?", 1)[0].decode("latin-1").split("/", len(_PREFIX_SEGMENTS))
    if len(parts) <= len(_PREFIX_SEGMENTS):
        return None
    if [unquote(part) for part in parts[:-1]] != _PREFIX_SEGMENTS:
        return None
    return parts[-1]


def _decode(raw: str) -> str:
    try:
        return unquote_to_bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        raise invalid("task id must be UTF-8 once percent-decoded", field="taskId") from None


def split_task_path(path: bytes, query_id: str | None = None) -> tuple[str, str | None]:
    """``(task id, suffix or None)`` from the raw request path under ``/api/tasks/``.

    An empty id segment means the id is ``query_id`` (the ``id`` query parameter).
    """
    rest = tasks_remainder(path)
    if rest is None:
        raise invalid("not a task URL: expected /api/tasks/<id>", field="taskId")
    parts = rest.split("/")
    suffix = None
    if len(parts) > 1 and parts[-1] in SUFFIXES:
        suffix = parts.pop()
    task_id = "/".join(_decode(part) for part in parts) or query_id or ""
    if not task_id:
        raise invalid("task id must not be empty", field="taskId")
    return task_id, suffix


def task_path(task_id: str, suffix: str | None = None) -> str:
    """The URL path for a task (and one of its suffixes), id percent-encoded."""
    segment = quote(task_id, safe="")
    path = TASKS_PREFIX + _DOT_SEGMENTS.get(segment, segment)
    return f"{path}/{suffix}" if suffix else path
