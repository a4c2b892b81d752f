"""A task's output stream over HTTP: ``GET /api/tasks/<id>/output`` (one page after a
cursor, JSON) and ``GET /api/tasks/<id>/output-stream`` (server-sent events: one
``output`` event per chunk, its ``id`` the chunk's number, then ``end`` once the task
has ended and its last chunk went out). A client that reconnects sends the last id it
saw as ``Last-Event-ID`` (or ``?cursor=``) and gets every chunk after it, once.

The streams of one task share one reader (``follow_output``, ``OutputFeeds``), which
waits on the task's stream between reads.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Annotated, Any

from pydantic import BaseModel, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .._checks import MAX_PAGE, require_limit
from .._models import to_wire
from .._output import OutputChunk, OutputPage
from ._paths import TASKS, raw_path, split_task_path
from ._reader import Reader
from ._responses import StreamSlots
from ._routes import ERROR, SSE, STREAMS_FULL, Operation, json_answer
from ._schemas import Absent, Error, StreamHeaders, TaskIdPath
from ._sse import MAX_CURSOR, format_comment, format_event, parse_count, parse_cursor

__all__ = ["STREAM_PAGE", "OutputApi", "output_operations"]

STREAM_PAGE = 500
"""How many chunks a stream holds for a slow client before its follower waits."""


_STREAM_HELP = (
    "One `output` event per chunk (data: the OutputChunk; `id:` its `seq`), then an "
    "`end` event (data `{taskId, state, cursor}`) once the task has ended and its last "
    "chunk went out. Reconnect with `Last-Event-ID` (or `?cursor=`): every chunk after "
    "it comes, once, across worker retries (each chunk names its `attempt`)."
)


class OutputQuery(BaseModel):
    cursor: int = Field(0, ge=0, le=MAX_CURSOR, description="The last chunk seen (0: none).")
    limit: Annotated[int, Field(ge=1, le=MAX_PAGE)] | Absent = Field(
        None, description=f"Most chunks answered (default and most {MAX_PAGE})."
    )


class OutputStreamQuery(BaseModel):
    cursor: int = Field(0, ge=0, le=MAX_CURSOR, description="The last chunk seen (0: none).")


def output_operations(reader: Reader, keepalive: float, streams: StreamSlots) -> list[Operation]:
    """The output routes (the read role, as every read); each stream takes one of ``streams``."""
    api = OutputApi(reader, keepalive, streams)
    no_task = json_answer(Error, "No such task; code `invalid-request`, field `taskId`")
    ids: dict[str, Any] = {"path_params": TaskIdPath, "raw": TASKS}
    return [
        Operation.at(
            "GET /api/tasks/{id}/output",
            api.page,
            "The task's output chunks after a cursor",
            {200: json_answer(OutputPage, "One page of chunks"), 400: ERROR, 404: no_task},
            query=OutputQuery,
            **ids,
        ),
        Operation.at(
            "GET /api/tasks/{id}/output-stream",
            api.stream,
            "Server-sent events: the task's output as it is written, then end",
            {200: SSE, 400: ERROR, 404: no_task, 503: STREAMS_FULL},
            description=_STREAM_HELP,
            headers=StreamHeaders,
            query=OutputStreamQuery,
            **ids,
        ),
    ]


def _task_id(request: Request) -> str:
    return split_task_path(raw_path(request.scope), request.query_params.get("id"))[0]


class OutputApi:
    """The two output handlers over the server's reader."""

    def __init__(self, reader: Reader, keepalive: float, streams: StreamSlots) -> None:
        self.reader = reader
        self.keepalive = keepalive
        self.streams = streams

    async def page(self, request: Request) -> Response:
        params = request.query_params
        cursor = parse_cursor(params.get("cursor"), "cursor")
        limit = params.get("limit")
        count = MAX_PAGE if limit is None else require_limit(parse_count(limit, "limit"))
        page = await self.reader.output(_task_id(request), cursor, count)
        return JSONResponse(to_wire(page))

    async def stream(self, request: Request) -> Response:
        task_id = _task_id(request)
        cursor = parse_cursor(request.query_params.get("cursor"), "cursor")  # checked always
        header = request.headers.get("last-event-id")
        if header is not None:
            cursor = parse_cursor(header, "Last-Event-ID")
        await self.reader.output(task_id, cursor, 1)  # an unknown task: 404 before the stream
        return self.streams.response(self._events(task_id, cursor))

    async def _events(self, task_id: str, cursor: int) -> AsyncIterator[bytes]:
        """The follower's chunks as events (through a queue, so that a quiet stream gets
        its keepalive comment), then ``end``."""
        queue: asyncio.Queue[OutputChunk | BaseException | None] = asyncio.Queue(STREAM_PAGE)

        async def pump() -> None:
            try:
                async with contextlib.aclosing(self.reader.follow_output(task_id, cursor)) as feed:
                    async for chunk in feed:
                        await queue.put(chunk)
                await queue.put(None)
            except Exception as error:  # the book failed: the stream says so and ends
                await queue.put(error)

        pumping = asyncio.get_running_loop().create_task(pump())
        try:
            yield b"retry: 1000\n\n"
            while True:
                try:
                    item = await asyncio.wait_for(queue.get(), self.keepalive)
                except TimeoutError:
                    yield format_comment("keepalive")
                    continue
                if isinstance(item, OutputChunk):
                    cursor = item.seq
                    yield format_event("output", to_wire(item), id=item.seq)
                elif item is None:
                    page = await self.reader.output(task_id, cursor, 1)
                    end = {"taskId": task_id, "state": page.state, "cursor": page.cursor}
                    yield format_event("end", end, id=page.cursor)
                    return
                else:
                    yield format_event(
                        "stream-error", {"code": "stream-ended", "message": str(item)}
                    )
                    return
        finally:
            pumping.cancel()
