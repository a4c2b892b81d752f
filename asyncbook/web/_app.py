"""The status server: a JSON API, task and group streams, metrics and the pages (Starlette)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

import anyio
import anyio.to_thread
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import BaseRoute, Match, Mount, NoMatchFound, Route, request_response
from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

from .._book import AsyncBook
from .._checks import require_limit
from .._console import NameTotals
from .._models import AsyncTask, GroupSummary, to_wire
from .._reasons import Reason
from .._watch import task_summary
from ..errors import AsyncBookError, BookUnavailableError, UnknownTaskError, invalid
from ._auth import TokenAuth, check_token
from ._bodies import cross_site, read_json_object, refuse_cross_site
from ._cancel import CANCEL_BODY_LIMIT, CANCEL_FIELDS, cancel_reason
from ._console_api import (
    CONSOLE_FILTERS,
    ConsoleApi,
    ConsoleBook,
    listing_answer,
    search_query,
    task_answer,
)
from ._feed import Change, ChangeFeed, LocalChangeFeed
from ._groups import GROUP_MEMBERS, GroupHub, GroupWatcher, UnknownGroupError
from ._health import HEALTH_PATH, health_route, read_health
from ._hosts import HostCheck, allowed_host_names
from ._hub import Batch, Hub, Watcher
from ._login import LoginThrottle, Sessions, login_routes
from ._metrics import CONTENT_TYPE_LATEST, render_metrics, sweep_lateness
from ._openapi import openapi_schema
from ._pages import read_page
from ._paths import (
    group_page_remainder,
    groups_remainder,
    raw_path,
    split_group_path,
    split_task_path,
    tasks_remainder,
)
from ._reader import Reader, close_reader, reader_for
from ._responses import error_response
from ._sse import format_comment, format_event, parse_count, parse_cursor

__all__ = ["create_app"]

KEEPALIVE_SECONDS = 15.0
OPEN_PATHS = frozenset({"/metrics", HEALTH_PATH, "/login", "/logout"})
PAGE_PATHS = frozenset({"/", "/task", "/workers", "/stats"})
PAGE_OF_PATH = {
    "/": "index.html",
    "/task": "task.html",
    "/workers": "workers.html",
    "/stats": "stats.html",
}
PAGE_PREFIXES = ("/groups/",)
_UNAVAILABLE = (BookUnavailableError, ConnectionError, TimeoutError)
_STATUS_OF_CODE = {"conflict": 409, "unavailable": 503, "damaged": 500}
"""HTTP status by error code; any other code is bad input (400)."""


def _book_error(error: AsyncBookError) -> JSONResponse:
    if isinstance(error, UnknownTaskError):
        return error_response(404, "not-found", f"no task {error.task_id!r}", "taskId")
    if isinstance(error, UnknownGroupError):
        return error_response(404, "not-found", f"no group {error.group_id!r}", "groupId")
    if isinstance(error, BookUnavailableError):
        return error_response(503, "unavailable", f"the book is unreachable: {error}")
    status = _STATUS_OF_CODE.get(error.code, 400)
    return error_response(status, error.code, error.message, error.field)


async def _on_book_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, AsyncBookError)
    return _book_error(error)


async def _on_http_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)
    codes = {404: "not-found", 405: "method-not-allowed", 413: "too-large"}
    code = codes.get(error.status_code, "http-error")
    # The library's headers travel with it: every 405 says what is Allowed.
    return error_response(error.status_code, code, str(error.detail), headers=error.headers)


async def _on_disconnect(request: Request, error: Exception) -> Response:
    """The client went away mid-body: nobody is left to answer, so nothing to log."""
    return Response(status_code=400)


async def _on_unavailable(request: Request, error: Exception) -> Response:
    return error_response(503, "unavailable", f"the book is unreachable: {error}")


class StatusApp:
    """Handlers over one book and one hub; ``create_app`` wires them into Starlette."""

    def __init__(
        self,
        book: AsyncBook | Reader,
        reader: Reader,
        hub: Hub,
        keepalive: float,
        signin: bool = False,
        groups: GroupHub | None = None,
    ):
        self.book = book
        self.reader = reader
        """The book, read awaited: every handler reads through it (``reader_for``)."""
        self.hub = hub
        self.groups = groups if groups is not None else GroupHub(reader)
        self.keepalive = keepalive
        self.signin = signin
        self.console = isinstance(book, ConsoleBook)
        """True when the book keeps task info (the console's API is served then)."""
        self.task_handlers: dict[
            tuple[str | None, str], Callable[[Request, str], Awaitable[Response]]
        ] = {
            (None, "GET"): self.get_task,
            ("events", "GET"): self.events,
            ("stream", "GET"): self.stream,
            ("delivery", "POST"): self.deliver,
            ("cancel", "POST"): self.cancel,
        }
        self.group_handlers: dict[
            tuple[str | None, str], Callable[[Request, str], Awaitable[Response]]
        ] = {
            (None, "GET"): self.get_group,
            ("stream", "GET"): self.group_stream,
        }

    async def list_tasks(self, request: Request) -> Response:
        params = request.query_params
        if self.console:
            query = search_query(params, int(time.time() * 1000))
            return JSONResponse(listing_answer(await self.reader.search(query)))
        for name in CONSOLE_FILTERS:
            if params.get(name):
                raise invalid(f"{name}: this book keeps no task info to search", field=name)
        state = params.get("state") or None
        limit_text = params.get("limit")
        limit = 50 if limit_text in (None, "") else parse_count(limit_text, "limit")
        after = params.get("after") or None
        page = await self.reader.list_tasks(state, limit, after, full_task=False)
        body: dict[str, Any] = {"tasks": [task_summary(task) for task in page.tasks]}
        if page.next_after is not None:
            body["nextAfter"] = page.next_after
        return JSONResponse(body)

    async def task_route(self, request: Request) -> Response:
        query_id = request.query_params.get("id")
        task_id, suffix = split_task_path(raw_path(request.scope), query_id)
        return await _dispatch(self.task_handlers, request, task_id, suffix)

    async def group_route(self, request: Request) -> Response:
        query_id = request.query_params.get("id")
        group_id, suffix = split_group_path(raw_path(request.scope), query_id)
        return await _dispatch(self.group_handlers, request, group_id, suffix)

    async def get_group(self, request: Request, group_id: str) -> Response:
        limit_text = request.query_params.get("limit")
        limit = GROUP_MEMBERS
        if limit_text not in (None, ""):
            limit = require_limit(parse_count(limit_text, "limit"))
        summary, tasks = await _group_detail(self.reader, group_id, limit)
        if summary is None:
            raise UnknownGroupError(group_id)
        return JSONResponse({**to_wire(summary), "tasks": [task_summary(t) for t in tasks]})

    async def group_stream(self, request: Request, group_id: str) -> Response:
        watcher = self.groups.watch(group_id)
        first = await watcher.queue.get()
        if isinstance(first, BaseException):
            self.groups.unwatch(watcher)
            if isinstance(first, AsyncBookError):
                return _book_error(first)
            return error_response(503, "unavailable", f"the book is unreachable: {first}")
        return _sse(self._pump(first, watcher))

    async def get_task(self, request: Request, task_id: str) -> Response:
        body = await task_answer(self.reader, task_id, self.console)
        if body is None:
            raise UnknownTaskError(task_id)
        return JSONResponse(body)

    async def events(self, request: Request, task_id: str) -> Response:
        cursor = parse_cursor(request.query_params.get("cursor"), "cursor")
        result = await self.reader.resume(task_id, cursor)
        return JSONResponse(to_wire(result))

    async def deliver(self, request: Request, task_id: str) -> Response:
        key = _utf8_header(request, b"idempotency-key", "idempotencyKey")
        if key is None:
            raise invalid("the Idempotency-Key header is required", field="idempotencyKey")
        result = await self.reader.deliver_result(task_id, key, time.time() * 1000)
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

    async def cancel(self, request: Request, task_id: str) -> Response:
        if cross_site(request):
            # No token, no cookie: a page on another site could post an empty body here.
            return refuse_cross_site("this change")
        body = await read_json_object(request, CANCEL_BODY_LIMIT, CANCEL_FIELDS)
        if isinstance(body, Response):
            return body
        reason = cancel_reason(body.get("reason"))
        try:
            result = await self.reader.cancel(task_id, reason)
        except AsyncBookError as error:
            if error.field == "event.reason":  # the book's name for it; the API's is "reason"
                raise AsyncBookError(error.code, error.message, field="reason") from None
            raise
        if result.reason in (Reason.CANCELLED, Reason.DUPLICATE_CANCEL):
            return JSONResponse(to_wire(result))
        state = result.task.state.value
        if result.reason is Reason.EXPIRED:
            message = f"task {task_id!r} was not cancelled: its deadline had passed, so it expired"
        else:
            message = f"task {task_id!r} was not cancelled: it had already ended ({state})"
        refusal = {"code": str(result.reason), "message": message, "state": state}
        return JSONResponse(refusal, status_code=409)

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
        return _sse(self._pump(first, watcher))

    async def _pump(self, first: Batch, watcher: Watcher | GroupWatcher) -> AsyncIterator[bytes]:
        """A stream's body: the watcher's batches as they come, a comment while quiet."""
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
            if isinstance(watcher, GroupWatcher):
                self.groups.unwatch(watcher)
            else:
                self.hub.unwatch(watcher)

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
        states = await self.reader.count_by_state()
        answers = await self.reader.transition_counts()
        lateness = await sweep_lateness(self.reader)
        health = await read_health(self.reader)
        names: list[NameTotals] = []
        if self.console:
            names = await self.reader.name_totals()
        text = render_metrics(
            states,
            answers,
            lateness,
            watchers=self.hub.watcher_count,
            lookups=self.hub.lookups,
            feed_resets=self.hub.resets,
            group_watchers=self.groups.watcher_count,
            group_lookups=self.groups.lookups,
            names=names,
            health=health,
        )
        return Response(text, media_type=CONTENT_TYPE_LATEST)

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(openapi_schema(console=self.console))

    async def page(self, request: Request) -> Response:
        return await self._page(PAGE_OF_PATH[request.url.path])

    async def group_page(self, request: Request) -> Response:
        """``/groups/<id>``: the page reads the id from its own URL."""
        if request.method not in ("GET", "HEAD"):
            response = error_response(
                405, "method-not-allowed", f"{request.method} is not allowed here; use GET, HEAD"
            )
            response.headers["Allow"] = "GET, HEAD"
            return response
        return await self._page("group.html")

    async def _page(self, name: str) -> Response:
        text = await anyio.to_thread.run_sync(read_page, name)
        if self.signin:
            text = text.replace(_SIGN_OUT_HIDDEN, _SIGN_OUT_SHOWN)
            # A change needs the bearer token (the cookie never authorizes one): ask for it.
            text = text.replace(_TOKEN_FIELD_HIDDEN, _TOKEN_FIELD_SHOWN)
        return HTMLResponse(text)


_SIGN_OUT_HIDDEN = '<form id="signout" method="post" action="/logout" hidden>'
_SIGN_OUT_SHOWN = '<form id="signout" method="post" action="/logout">'
_TOKEN_FIELD_HIDDEN = '<p id="cancel-token-field" hidden>'
_TOKEN_FIELD_SHOWN = '<p id="cancel-token-field">'


async def _dispatch(
    handlers: dict[tuple[str | None, str], Callable[[Request, str], Awaitable[Response]]],
    request: Request,
    item_id: str,
    suffix: str | None,
) -> Response:
    """The handler for ``(suffix, method)``, or 405 naming the methods there are."""
    method = "GET" if request.method == "HEAD" else request.method
    handler = handlers.get((suffix, method))
    if handler is None:
        allowed = ", ".join(m for (s, m) in handlers if s == suffix)
        response = error_response(
            405, "method-not-allowed", f"{request.method} is not allowed here; use {allowed}"
        )
        response.headers["Allow"] = allowed
        return response
    return await handler(request, item_id)


async def _group_detail(
    book: Reader, group_id: str, limit: int
) -> tuple[GroupSummary | None, list[AsyncTask]]:
    """The group's summary and its first ``limit`` members (none when it is unknown)."""
    summary = await book.group(group_id)
    if summary is None:
        return None, []
    return summary, await book.group_members(group_id, limit)


def _utf8_header(request: Request, name: bytes, field: str) -> str | None:
    """A header's value read as UTF-8 (the bytes as sent; Starlette reads latin-1)."""
    for key, value in request.scope["headers"]:
        if key == name:
            try:
                return bytes(value).decode("utf-8")
            except UnicodeDecodeError:
                raise invalid(f"{field} must be UTF-8", field=field) from None
    return None


class TaskRoute(BaseRoute):
    """Every ``/api/tasks/<id>[/suffix]`` URL, matched on the raw path (see ``_paths``).

    Starlette's path patterns match the decoded path and stop at a newline; the id must
    be found the same way it is read, or ``/api/ta%73ks/ID`` would read another id.
    ``remainder`` says which prefix (tasks, groups, the group page) the route takes.
    """

    def __init__(
        self,
        endpoint: Callable[[Request], Awaitable[Response]],
        remainder: Callable[[bytes], str | None] = tasks_remainder,
    ) -> None:
        self.endpoint = endpoint
        self.remainder = remainder
        self.app = request_response(endpoint)

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] == "http" and self.remainder(raw_path(scope)) is not None:
            return Match.FULL, {"endpoint": self.endpoint, "path_params": {}}
        return Match.NONE, {}

    def url_path_for(self, name: str, /, **path_params: Any) -> Any:
        raise NoMatchFound(name, path_params)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


def _console_routes(status: StatusApp) -> list[BaseRoute]:
    """The console's API and pages, over a book that keeps task info (none otherwise)."""
    if not status.console:
        return []
    pages: list[BaseRoute] = [Route("/workers", status.page), Route("/stats", status.page)]
    return pages + ConsoleApi(status.reader).routes()


def _sse(body: AsyncIterator[bytes]) -> StreamingResponse:
    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    return StreamingResponse(body, media_type="text/event-stream", headers=headers)


def create_app(
    book: AsyncBook | Reader,
    feed: ChangeFeed | None = None,
    *,
    token: str | None = None,
    keepalive: float = KEEPALIVE_SECONDS,
    allowed_hosts: Iterable[str] = (),
) -> Starlette:
    """The status server over ``book``, following ``feed`` (a ``LocalChangeFeed`` if None).

    The server reads the book awaited: a ``RedisBook`` through an ``AsyncRedisBook`` on
    an asyncio twin of its client (``reader_for``), an ``AsyncRedisBook`` as it is.

    With ``token`` set (16 characters at least) every path but ``/metrics`` (and the
    sign-in form) needs it. Requests are answered only when their ``Host`` is a loopback
    name or one of ``allowed_hosts`` (``*.example.com`` matches subdomains).
    """
    check_token(token)
    hosts = allowed_host_names(allowed_hosts)
    feed = feed if feed is not None else LocalChangeFeed()
    reader = reader_for(book)
    hub = Hub(reader)
    groups = GroupHub(reader)
    status = StatusApp(book, reader, hub, keepalive, signin=bool(token), groups=groups)

    def on_change(change: Change) -> None:
        hub.on_change(change)
        groups.on_change(change)

    def on_reset() -> None:
        hub.on_reset()
        groups.on_reset()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        listener = asyncio.get_running_loop().create_task(feed.listen(on_change, on_reset))
        try:
            yield
        finally:
            await hub.close()
            await groups.close()
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener
            await close_reader(reader, book)

    routes: list[BaseRoute] = [
        Route("/", status.page),
        Route("/task", status.page),
        Route("/api/tasks", status.list_tasks),
        Route("/api/changes", status.changes),
        TaskRoute(status.task_route),
        TaskRoute(status.group_route, groups_remainder),
        TaskRoute(status.group_page, group_page_remainder),
        Route("/metrics", status.metrics),
        health_route(reader),
        Route("/openapi.json", status.openapi),
        *_console_routes(status),
        Mount("/static", StaticFiles(packages=[("asyncbook.web", "static")]), name="static"),
    ]
    throttle = LoginThrottle()
    if token:
        routes += login_routes(token, throttle)
    handlers: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
        AsyncBookError: _on_book_error,
        HTTPException: _on_http_error,
        ClientDisconnect: _on_disconnect,
    }
    for kind in _UNAVAILABLE:
        handlers[kind] = _on_unavailable
    app = Starlette(routes=routes, exception_handlers=handlers, lifespan=lifespan)
    app.state.book = book
    app.state.hub = hub
    app.state.groups = groups
    app.state.feed = feed
    app.state.allowed_hosts = hosts
    app.state.login_throttle = throttle
    # Added innermost first: HostCheck sees every request, then the session, then the token.
    if token:
        app.add_middleware(
            TokenAuth,
            token=token,
            open_paths=OPEN_PATHS,
            page_paths=PAGE_PATHS,
            page_prefixes=PAGE_PREFIXES,
        )
        app.add_middleware(Sessions, token=token)
    app.add_middleware(HostCheck, allowed_hosts=hosts)
    return app
