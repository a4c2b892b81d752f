"""The status server: a JSON API, task streams, metrics and the page (Starlette)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any
from urllib.parse import parse_qs

import anyio
import anyio.to_thread
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from .._book import AsyncBook
from .._models import to_wire
from .._reasons import Reason
from .._watch import task_summary
from ..errors import AsyncBookError, BookUnavailableError, UnknownTaskError, invalid
from ._auth import COOKIE, TokenAuth, token_matches
from ._feed import ChangeFeed, LocalChangeFeed
from ._hub import Batch, Hub
from ._metrics import render_metrics, sweep_lateness
from ._openapi import openapi_schema
from ._pages import read_page
from ._paths import TASKS_PREFIX, split_task_path
from ._sse import format_comment, format_event, parse_count, parse_cursor

__all__ = ["create_app"]

KEEPALIVE_SECONDS = 15.0
BOOK_THREADS = 4
OPEN_PATHS = frozenset({"/metrics", "/login"})
PAGE_PATHS = frozenset({"/", "/task"})
_UNAVAILABLE = (BookUnavailableError, ConnectionError, TimeoutError)
_STATUS_OF_CODE = {"conflict": 409, "unavailable": 503, "damaged": 500}
"""HTTP status by error code; any other code is bad input (400)."""


def error_response(status: int, code: str, message: str, field: str | None = None) -> JSONResponse:
    """The API's error shape: ``{"code", "message"}`` (and ``field`` when one is to blame)."""
    body: dict[str, Any] = {"code": code, "message": message}
    if field is not None:
        body["field"] = field
    return JSONResponse(body, status_code=status)


def _book_error(error: AsyncBookError) -> JSONResponse:
    if isinstance(error, UnknownTaskError):
        return error_response(404, "not-found", f"no task {error.task_id!r}", "taskId")
    if isinstance(error, BookUnavailableError):
        return error_response(503, "unavailable", f"the book is unreachable: {error}")
    status = _STATUS_OF_CODE.get(error.code, 400)
    return error_response(status, error.code, error.message, error.field)


async def _on_book_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, AsyncBookError)
    return _book_error(error)


async def _on_http_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)
    codes = {404: "not-found", 405: "method-not-allowed"}
    code = codes.get(error.status_code, "http-error")
    return error_response(error.status_code, code, str(error.detail))


async def _on_unavailable(request: Request, error: Exception) -> Response:
    return error_response(503, "unavailable", f"the book is unreachable: {error}")


class BookThreads:
    """Runs blocking book calls off the event loop, on at most ``size`` threads at once.

    A book call is one short Redis round trip: a few threads keep a core busy, and more
    only fight over the GIL (50 clients on 40 threads made every lookup slower).
    """

    def __init__(self, size: int = BOOK_THREADS) -> None:
        self.size = size
        self._limiter: anyio.CapacityLimiter | None = None

    async def __call__(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(self.size)
        return await anyio.to_thread.run_sync(fn, *args, limiter=self._limiter)


class StatusApp:
    """Handlers over one book and one hub; ``create_app`` wires them into Starlette."""

    def __init__(
        self,
        book: AsyncBook,
        hub: Hub,
        keepalive: float,
        threads: BookThreads,
    ):
        self.book = book
        self.hub = hub
        self.keepalive = keepalive
        self.call = threads
        self.task_handlers: dict[
            tuple[str | None, str], Callable[[Request, str], Awaitable[Response]]
        ] = {
            (None, "GET"): self.get_task,
            ("events", "GET"): self.events,
            ("stream", "GET"): self.stream,
            ("delivery", "POST"): self.deliver,
        }

    async def list_tasks(self, request: Request) -> Response:
        params = request.query_params
        state = params.get("state") or None
        limit_text = params.get("limit")
        limit = 50 if limit_text in (None, "") else parse_count(limit_text, "limit")
        after = params.get("after") or None
        listing = partial(self.book.list_tasks, full_task=False)
        page = await self.call(listing, state, limit, after)
        body = {"tasks": [task_summary(task) for task in page.tasks]}
        if page.next_after is not None:
            body["nextAfter"] = page.next_after
        return JSONResponse(body)

    async def task_route(self, request: Request) -> Response:
        raw = request.scope.get("raw_path") or request.url.path.encode("latin-1")
        task_id, suffix = split_task_path(raw)
        method = "GET" if request.method == "HEAD" else request.method
        handler = self.task_handlers.get((suffix, method))
        if handler is None:
            allowed = ", ".join(m for (s, m) in self.task_handlers if s == suffix)
            response = error_response(
                405, "method-not-allowed", f"{request.method} is not allowed here; use {allowed}"
            )
            response.headers["Allow"] = allowed
            return response
        return await handler(request, task_id)

    async def get_task(self, request: Request, task_id: str) -> Response:
        task = await self.call(self.book.get, task_id)
        if task is None:
            raise UnknownTaskError(task_id)
        return JSONResponse(to_wire(task))

    async def events(self, request: Request, task_id: str) -> Response:
        cursor = parse_cursor(request.query_params.get("cursor"), "cursor")
        result = await self.call(self.book.resume, task_id, cursor)
        return JSONResponse(to_wire(result))

    async def deliver(self, request: Request, task_id: str) -> Response:
        key = request.headers.get("idempotency-key")
        if key is None:
            raise invalid("the Idempotency-Key header is required", field="idempotencyKey")
        result = await self.call(self.book.deliver_result, task_id, key, time.time() * 1000)
        if result.reason is Reason.KEY_REUSED_FOR_OTHER_TASK:
            # The stored receipt belongs to another task: never show it.
            return error_response(
                409,
                "conflict",
                "this Idempotency-Key was already used for another task",
                "idempotencyKey",
            )
        if not result.ok:
            body = {
                "code": result.reason,
                "message": f"task {task_id!r} has no result to deliver (not succeeded)",
            }
            return JSONResponse(body, status_code=409)
        return JSONResponse(to_wire(result))

    async def stream(self, request: Request, task_id: str) -> Response:
        header = request.headers.get("last-event-id")
        if header is not None:
            cursor = parse_cursor(header, "Last-Event-ID")
        else:
            cursor = parse_cursor(request.query_params.get("cursor"), "cursor")
        watcher = self.hub.watch(task_id, cursor)
        first = await watcher.queue.get()
        if isinstance(first, BaseException):
            self.hub.unwatch(watcher)
            if isinstance(first, AsyncBookError):
                return _book_error(first)
            return error_response(503, "unavailable", f"the book is unreachable: {first}")

        async def body() -> AsyncIterator[bytes]:
            batch: Batch | BaseException = first
            try:
                yield b"retry: 1000\n\n"
                while True:
                    if isinstance(batch, BaseException):
                        error = {"code": "stream-ended", "message": str(batch)}
                        yield format_event("stream-error", error)
                        return
                    yield batch.payload
                    if batch.end:
                        return
                    try:
                        batch = await asyncio.wait_for(watcher.queue.get(), self.keepalive)
                    except TimeoutError:
                        yield format_comment("keepalive")
                        batch = Batch(payload=b"", end=False)
            finally:
                self.hub.unwatch(watcher)

        return _sse(body())

    async def changes(self, request: Request) -> Response:
        queue = self.hub.follow()

        async def body() -> AsyncIterator[bytes]:
            try:
                yield b"retry: 1000\n\n"
                while True:
                    try:
                        change = await asyncio.wait_for(queue.get(), self.keepalive)
                    except TimeoutError:
                        yield format_comment("keepalive")
                        continue
                    if change is None:
                        yield format_event("resync", {})
                    else:
                        yield format_event("change", change.to_wire())
            finally:
                self.hub.unfollow(queue)

        return _sse(body())

    async def metrics(self, request: Request) -> Response:
        states = await self.call(self.book.count_by_state)
        answers = await self.call(self.book.transition_counts)
        lateness = await self.call(sweep_lateness, self.book)
        text = render_metrics(
            states,
            answers,
            lateness,
            watchers=self.hub.watcher_count,
            lookups=self.hub.lookups,
            feed_resets=self.hub.resets,
        )
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(openapi_schema())

    async def page(self, request: Request) -> Response:
        name = "index.html" if request.url.path == "/" else "task.html"
        return HTMLResponse(await self.call(read_page, name))


def _sse(body: AsyncIterator[bytes]) -> StreamingResponse:
    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    return StreamingResponse(body, media_type="text/event-stream", headers=headers)


def _login_routes(token: str | None) -> list[Route]:
    async def login(request: Request) -> Response:
        if request.method == "GET":
            return HTMLResponse(await run_in_threadpool(read_page, "login.html"))
        body = (await request.body())[:4096].decode("utf-8", errors="replace")
        given = parse_qs(body).get("token", [None])[0]
        if token is None or given is None or not token_matches(given, token):
            return HTMLResponse(await run_in_threadpool(read_page, "login.html"), 401)
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(COOKIE, given, httponly=True, samesite="strict")
        return response

    return [Route("/login", login, methods=["GET", "POST"])]


def create_app(
    book: AsyncBook,
    feed: ChangeFeed | None = None,
    *,
    token: str | None = None,
    keepalive: float = KEEPALIVE_SECONDS,
) -> Starlette:
    """The status server over ``book``, following ``feed`` (a ``LocalChangeFeed`` if None).

    With ``token`` set every path but ``/metrics`` (and the login form) needs it.
    """
    feed = feed if feed is not None else LocalChangeFeed()
    threads = BookThreads()
    hub = Hub(book, run_sync=threads)
    status = StatusApp(book, hub, keepalive, threads)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        listener = asyncio.get_running_loop().create_task(feed.listen(hub.on_change, hub.on_reset))
        try:
            yield
        finally:
            await hub.close()
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener

    routes = [
        Route("/", status.page),
        Route("/task", status.page),
        Route("/api/tasks", status.list_tasks),
        Route("/api/changes", status.changes),
        Route(TASKS_PREFIX + "{rest:path}", status.task_route, methods=["GET", "POST"]),
        Route("/metrics", status.metrics),
        Route("/openapi.json", status.openapi),
        Mount("/static", StaticFiles(packages=[("asyncbook.web", "static")]), name="static"),
    ]
    if token:
        routes += _login_routes(token)
    handlers: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
        AsyncBookError: _on_book_error,
        HTTPException: _on_http_error,
    }
    for kind in _UNAVAILABLE:
        handlers[kind] = _on_unavailable
    app = Starlette(routes=routes, exception_handlers=handlers, lifespan=lifespan)
    app.state.book = book
    app.state.hub = hub
    app.state.feed = feed
    if token:
        app.add_middleware(TokenAuth, token=token, open_paths=OPEN_PATHS, page_paths=PAGE_PATHS)
    return app
