"""Task URLs: ``/api/tasks/<id>[/events|/stream|/delivery|/cancel|/resend|/audit|/result]``
(and ``/retry``, resend's old name; ``/output`` and ``/output-stream``), matched and split
on the raw path.

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

Group URLs (``/api/groups/<id>[/stream]``, and the page ``/groups/<id>``) are split the
same way: a group id may hold anything a task id may.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import quote, unquote, unquote_to_bytes

from starlette.types import Scope

from .._limits import require_task_id_length
from ..errors import invalid

__all__ = [
    "CANVASES",
    "CANVAS_PAGES",
    "CANVAS_SUFFIXES",
    "GROUPS_PREFIX",
    "GROUP_PAGE_PREFIX",
    "GROUP_PAGES",
    "GROUP_SUFFIXES",
    "GROUPS",
    "SUFFIXES",
    "TASKS",
    "IdUrls",
    "TASKS_PREFIX",
    "group_page_remainder",
    "group_path",
    "groups_remainder",
    "raw_path",
    "split_canvas_path",
    "split_group_path",
    "split_task_path",
    "suffix_of",
    "task_path",
    "tasks_remainder",
]

TASKS_PREFIX = "/api/tasks/"
SUFFIXES = frozenset(
    {
        "events",
        "stream",
        "delivery",
        "cancel",
        "resend",
        "retry",
        "audit",
        "output",
        "output-stream",
        "result",
    }
)
GROUPS_PREFIX = "/api/groups/"
GROUP_SUFFIXES = frozenset({"stream"})
GROUP_PAGE_PREFIX = "/groups/"
_PREFIX_SEGMENTS = ["", "api", "tasks"]
_GROUP_SEGMENTS = ["", "api", "groups"]
_GROUP_PAGE_SEGMENTS = ["", "groups"]
CANVAS_SUFFIXES = frozenset({"svg", "cancel", "resend"})
_CANVAS_SEGMENTS = ["", "api", "canvas"]
_CANVAS_PAGE_SEGMENTS = ["", "canvas"]
_DOT_SEGMENTS = {".": "%2E", "..": "%2E%2E"}


def raw_path(scope: Scope) -> bytes:
    """The request path as the client sent it (percent-encoded), without the query."""
    raw = scope.get("raw_path")
    if raw is None:
        raw = quote(scope["path"]).encode("ascii")
    return bytes(raw).split(b"?", 1)[0]


def _remainder(path: bytes, segments: list[str]) -> str | None:
    """The raw text after the prefix ``segments``, or None when ``path`` is not under it."""
    parts = path.split(b"?", 1)[0].decode("latin-1").split("/", len(segments))
    if len(parts) <= len(segments):
        return None
    if [unquote(part) for part in parts[:-1]] != segments:
        return None
    return parts[-1]


def tasks_remainder(path: bytes) -> str | None:
    """The raw text after ``/api/tasks/``, or None when ``path`` is not under it."""
    return _remainder(path, _PREFIX_SEGMENTS)


def groups_remainder(path: bytes) -> str | None:
    """The raw text after ``/api/groups/``, or None when ``path`` is not under it."""
    return _remainder(path, _GROUP_SEGMENTS)


def group_page_remainder(path: bytes) -> str | None:
    """The raw text after ``/groups/`` (the group page), or None when not under it."""
    return _remainder(path, _GROUP_PAGE_SEGMENTS)


def split_canvas_path(path: bytes, query_id: str | None = None) -> tuple[str, str | None]:
    """``(task id, suffix or None)`` from the raw path under ``/api/canvas/`` or the
    page's ``/canvas/`` (the id: any task of the canvas; as for tasks)."""
    rest = _remainder(path, _CANVAS_SEGMENTS)
    if rest is None:
        rest = _remainder(path, _CANVAS_PAGE_SEGMENTS)
    if rest is None:
        raise invalid("not a canvas URL: expected /api/canvas/<id>", field="rootId")
    task_id, suffix = _split(rest, CANVAS_SUFFIXES, query_id, "root", "rootId")
    require_task_id_length(task_id, "rootId")
    return task_id, suffix


def suffix_of(rest: str, suffixes: frozenset[str]) -> str | None:
    """The known suffix ``rest`` (the raw text after a prefix) ends in, if any: the last
    segment, when one of ``suffixes`` and not the only segment."""
    parts = rest.rsplit("/", 1)
    return parts[-1] if len(parts) > 1 and parts[-1] in suffixes else None


@dataclass(frozen=True)
class IdUrls:
    """One family of id URLs (tasks, groups, group pages): the raw text after its prefix,
    and the suffixes that may follow the id."""

    prefix: str
    remainder: Callable[[bytes], str | None]
    suffixes: frozenset[str] = frozenset()

    def suffix(self, path: bytes) -> tuple[bool, str | None]:
        """Whether the raw ``path`` is in this family, and the suffix it ends in."""
        rest = self.remainder(path)
        if rest is None:
            return False, None
        return True, suffix_of(rest, self.suffixes)


def _decode(raw: str, what: str, field: str) -> str:
    try:
        return unquote_to_bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        raise invalid(f"{what} id must be UTF-8 once percent-decoded", field=field) from None


def _split(
    rest: str, suffixes: frozenset[str], query_id: str | None, what: str, field: str
) -> tuple[str, str | None]:
    suffix = suffix_of(rest, suffixes)
    parts = rest.split("/")
    if suffix is not None:
        parts.pop()
    found = "/".join(_decode(part, what, field) for part in parts) or query_id or ""
    if not found:
        raise invalid(f"{what} id must not be empty", field=field)
    return found, suffix


def split_task_path(path: bytes, query_id: str | None = None) -> tuple[str, str | None]:
    """``(task id, suffix or None)`` from the raw request path under ``/api/tasks/``.

    An empty id segment means the id is ``query_id`` (the ``id`` query parameter); an id
    over ``TASK_ID_LIMIT`` characters is an ``invalid-request`` naming ``taskId``.
    """
    rest = tasks_remainder(path)
    if rest is None:
        raise invalid("not a task URL: expected /api/tasks/<id>", field="taskId")
    task_id, suffix = _split(rest, SUFFIXES, query_id, "task", "taskId")
    require_task_id_length(task_id)  # no book holds a longer one
    return task_id, suffix


def split_group_path(path: bytes, query_id: str | None = None) -> tuple[str, str | None]:
    """``(group id, suffix or None)`` from the raw request path under ``/api/groups/``.

    An empty id segment means the id is ``query_id``, as for tasks.
    """
    rest = groups_remainder(path)
    if rest is None:
        raise invalid("not a group URL: expected /api/groups/<id>", field="groupId")
    return _split(rest, GROUP_SUFFIXES, query_id, "group", "groupId")


def _path(prefix: str, item_id: str, suffix: str | None) -> str:
    segment = quote(item_id, safe="")
    path = prefix + _DOT_SEGMENTS.get(segment, segment)
    return f"{path}/{suffix}" if suffix else path


def task_path(task_id: str, suffix: str | None = None) -> str:
    """The URL path for a task (and one of its suffixes), id percent-encoded."""
    return _path(TASKS_PREFIX, task_id, suffix)


def group_path(group_id: str, suffix: str | None = None) -> str:
    """The URL path for a group (and its stream), id percent-encoded."""
    return _path(GROUPS_PREFIX, group_id, suffix)


TASKS = IdUrls(TASKS_PREFIX, tasks_remainder, SUFFIXES)
GROUPS = IdUrls(GROUPS_PREFIX, groups_remainder, GROUP_SUFFIXES)
GROUP_PAGES = IdUrls(GROUP_PAGE_PREFIX, group_page_remainder)
CANVASES = IdUrls("/api/canvas/", lambda path: _remainder(path, _CANVAS_SEGMENTS), CANVAS_SUFFIXES)
CANVAS_PAGES = IdUrls("/canvas/", lambda path: _remainder(path, _CANVAS_PAGE_SEGMENTS))
