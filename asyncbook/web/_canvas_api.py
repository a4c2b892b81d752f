"""``/api/canvas/<id>``: a canvas as a graph (JSON, or drawn as SVG), and what an operator
does to all of it at once: cancel its open members, resend its failed ones.

A canvas is found from any of its tasks: the task's root (``rootId`` in its info, Celery's
``root_id``), then breadth first through what the book records, level by level: each
task's children (the tasks it published: a chain's next link, a spawned task, a chord's
callback) and each group's members. Every level is read concurrently (a task's info and
its summary, O(1) each; a group's members in one call), and the read stops at
``CANVAS_LIMIT`` members (``truncated`` says so). ``asyncbook._canvas`` builds the graph.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Protocol, TypeVar, runtime_checkable

import anyio.to_thread
from pydantic import BaseModel, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .._canvas import CANVAS_LIMIT, Canvas, CanvasMember, build_canvas, canvas_svg
from .._console import TaskInfo
from .._models import AsyncTask, CallbackResult, to_wire
from .._reasons import Reason
from ..errors import DamagedRecordError, UnknownTaskError
from ..redis._console import CHILDREN_LISTED
from ._access import actor_of
from ._bodies import cross_site, read_json_object, refuse_cross_site
from ._cancel import CANCEL_BODY_LIMIT, CANCEL_FIELDS, cancel_reason
from ._paths import raw_path, split_canvas_path
from ._reader import Reader
from ._resend import RESEND_BATCH, Resending
from ._responses import error_response
from ._sse import MAX_CURSOR

__all__ = [
    "AT_ONCE",
    "CanvasApi",
    "CanvasCancel",
    "CanvasIdPath",
    "ChildrenReader",
    "in_turns",
    "read_canvas",
]

AT_ONCE = 16
"""Members of one canvas read (two calls each) at once, or cancelled at once by a book
without an audit trail: a big canvas must not take every connection of the book's pool."""

_T = TypeVar("_T")
_I = TypeVar("_I")


async def in_turns(call: Callable[[_I], Awaitable[_T]], items: Sequence[_I]) -> list[_T]:
    """``call`` of each item, ``AT_ONCE`` at a time; the answers in the items' order."""
    answers: list[_T] = []
    for start in range(0, len(items), AT_ONCE):
        answers += await asyncio.gather(*(call(item) for item in items[start : start + AT_ONCE]))
    return answers


class CanvasIdPath(BaseModel):
    id: str = Field(
        description="Any task of the canvas (its root is found), percent-encoded like a task id."
    )


class CanvasCancel(BaseModel):
    """What a canvas cancel did: the members it cancelled, and those that had ended."""

    root_id: str = Field(alias="rootId")
    cancelled: list[str]
    refused: list[str] = Field(description="Open when read, ended by the time of the cancel.")
    truncated: bool


async def _member(reader: Reader, task_id: str) -> CanvasMember | None:
    """The task's summary (no history) and info, read at once, or None when the book
    lacks either."""
    info, resumed = await asyncio.gather(
        reader.info(task_id),
        reader.resume(task_id, MAX_CURSOR, full_task=False),
        return_exceptions=True,
    )
    for answer in (info, resumed):
        if isinstance(answer, (UnknownTaskError, DamagedRecordError)):
            return None
        if isinstance(answer, BaseException):
            raise answer
    if info is None or not isinstance(info, TaskInfo) or isinstance(resumed, BaseException):
        return None
    return CanvasMember(task=resumed.task, info=info)


@runtime_checkable
class ChildrenReader(Protocol):
    """A reader that reads a task's children from every shard (``AsyncRedisBook``)."""

    shards: int

    async def children(self, task_id: str, limit: int = ...) -> list[str]: ...


async def _children(reader: Reader, member: CanvasMember, *, limit: int) -> list[str]:
    """The tasks ``member`` published: as its info lists them (those of its own shard, the
    first ``CHILDREN_LISTED``), else read from every shard (several shards, or more)."""
    listed = list(member.info.children)
    if not isinstance(reader, ChildrenReader):
        return listed
    if reader.shards == 1 and len(listed) < CHILDREN_LISTED:
        return listed
    return await reader.children(member.task.id, max(1, limit))


async def _root_of(reader: Reader, task_id: str) -> str | None:
    """The canvas root of ``task_id`` (its info's root when the book holds it), or None
    when the book holds no such task."""
    info = await reader.info(task_id)
    if info is None:
        return None
    root = info.root_id
    if root and root != task_id and await reader.info(root) is not None:
        return root
    return task_id


async def read_canvas(reader: Reader, task_id: str, limit: int = CANVAS_LIMIT) -> Canvas | None:
    """The canvas ``task_id`` is part of (from its root), at most ``limit`` members; None
    when the book holds no such task."""
    root = await _root_of(reader, task_id)
    if root is None:
        return None
    found: dict[str, CanvasMember] = {}
    groups: set[str] = set()
    level, truncated = [root], False
    while level:
        room = limit - len(found)
        if len(level) > room:
            level, truncated = level[:room], True
        read = await in_turns(lambda task_id: _member(reader, task_id), level)
        members = [member for member in read if member is not None]
        for member in members:
            found[member.task.id] = member
        following: list[str] = []
        room = max(1, limit - len(found))
        read_children = partial(_children, reader, limit=room)
        for children in await in_turns(read_children, members):
            following += children
        for member in members:
            group = member.info.group_id
            if group is not None and group not in groups:
                groups.add(group)
                tasks: Sequence[AsyncTask] = await reader.group_members(group, max(1, limit))
                following += [task.id for task in tasks]
        level = list(dict.fromkeys(i for i in following if i not in found))
        if level and len(found) >= limit:
            truncated = True
            break
    ordered = sorted(found.values(), key=lambda m: (m.info.created_at_ms or 0, m.task.id))
    return build_canvas(root, ordered, truncated=truncated)


def _canvas_id(request: Request) -> tuple[str, str | None]:
    return split_canvas_path(raw_path(request.scope), request.query_params.get("id"))


def _no_canvas(task_id: str) -> Response:
    return error_response(404, "not-found", f"no task {task_id!r} to draw a canvas of", "rootId")


class CanvasApi:
    """The canvas handlers over ``reader`` (audited cancels when ``audited``) and the
    server's ``resender`` (None: no broker)."""

    def __init__(self, reader: Reader, audited: bool, resender: Resending | None) -> None:
        self.reader = reader
        self.audited = audited
        self.resender = resender

    async def _canvas(self, request: Request) -> Canvas | Response:
        task_id, _suffix = _canvas_id(request)
        canvas = await read_canvas(self.reader, task_id)
        return _no_canvas(task_id) if canvas is None else canvas

    async def get_canvas(self, request: Request) -> Response:
        canvas = await self._canvas(request)
        if isinstance(canvas, Response):
            return canvas
        return JSONResponse(to_wire(canvas))

    async def get_svg(self, request: Request) -> Response:
        canvas = await self._canvas(request)
        if isinstance(canvas, Response):
            return canvas
        return Response(canvas_svg(canvas), media_type="image/svg+xml")

    async def _reason(self, request: Request) -> str | Response | None:
        if cross_site(request):
            return refuse_cross_site("this change")
        body = await read_json_object(request, CANCEL_BODY_LIMIT, CANCEL_FIELDS)
        if isinstance(body, Response):
            return body
        return cancel_reason(body.get("reason"))

    async def _cancel_one(self, request: Request, task_id: str, reason: str | None) -> bool:
        try:
            result: CallbackResult = await self.reader.cancel(task_id, reason)
        except UnknownTaskError:
            return False
        return result.reason is Reason.CANCELLED

    async def _cancel_all(self, request: Request, ids: list[str], reason: str | None) -> list[bool]:
        """Each member cancelled: audited, in one book call (``cancel_many``: one script
        call per shard); else (a book without an audit trail) ``AT_ONCE`` at a time."""
        if not self.audited:
            return await in_turns(lambda task_id: self._cancel_one(request, task_id, reason), ids)
        answers = await self.reader.cancel_many(ids, actor=actor_of(request), reason=reason)
        return [isinstance(a, CallbackResult) and a.reason is Reason.CANCELLED for a in answers]

    async def cancel(self, request: Request) -> Response:
        """Cancel every open member (audited, as the request's principal)."""
        reason = await self._reason(request)
        if isinstance(reason, Response):
            return reason
        canvas = await self._canvas(request)
        if isinstance(canvas, Response):
            return canvas
        open_ids = [n.id for n in canvas.nodes if n.state in ("queued", "running")]
        done = await self._cancel_all(request, open_ids, reason)
        cancelled = [task_id for task_id, ok in zip(open_ids, done, strict=True) if ok]
        refused = [task_id for task_id, ok in zip(open_ids, done, strict=True) if not ok]
        answer = CanvasCancel(
            rootId=canvas.root_id, cancelled=cancelled, refused=refused, truncated=canvas.truncated
        )
        return JSONResponse(answer.model_dump(by_alias=True))

    async def resend(self, request: Request) -> Response:
        """Resend every failed member through the server's resender (audited by it)."""
        reason = await self._reason(request)
        if isinstance(reason, Response):
            return reason
        canvas = await self._canvas(request)
        if isinstance(canvas, Response):
            return canvas
        if self.resender is None:
            return error_response(
                503, "no-broker", "this server has no broker to send tasks again to", "broker"
            )
        failed = [n.id for n in canvas.nodes if n.state == "failed" and not n.resent]
        more = len(failed) > RESEND_BATCH
        failed = failed[:RESEND_BATCH]
        call = partial(self.resender.resend, failed, actor=actor_of(request), reason=reason)
        results = await anyio.to_thread.run_sync(call)
        retried = sum(1 for result in results if result.code is None)
        return JSONResponse(
            {
                "results": [result.wire() for result in results],
                "retried": retried,
                "refused": len(results) - retried,
                "nextAfter": canvas.root_id if more else None,
            }
        )
