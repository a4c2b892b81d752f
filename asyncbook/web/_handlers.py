"""The status server's handlers over one book and its hubs (``StatusApp``); the route
table (``_table``) says which method and path each one answers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import anyio.to_thread
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from .._audit import AuditedBook
from .._book import AsyncBook
from .._checks import require_limit
from .._console import NameTotals
from .._models import AsyncTask, DeliveryReceipt, GroupSummary, to_wire
from .._reasons import Reason
from .._watch import task_summary
from ..errors import AsyncBookError, BookUnavailableError, UnknownTaskError, invalid
from ._access import Principal, actor_of, principal_of
from ._bodies import cross_site, read_json_object, refuse_cross_site
from ._cancel import CANCEL_BODY_LIMIT, CANCEL_FIELDS, cancel_reason
from ._console_api import CONSOLE_FILTERS, ConsoleBook, listing_answer, search_query, task_answer
from ._groups import GROUP_MEMBERS, GroupHub, GroupWatcher, UnknownGroupError
from ._health import Unconsumed, read_health
from ._hub import Batch, Hub, Watcher
from ._metrics import CONTENT_TYPE_LATEST, render_metrics, sweep_lateness
from ._pages import read_page
from ._paths import raw_path, split_group_path, split_task_path
from ._reader import Reader
from ._responses import StreamSlots, error_response
from ._results import with_download
from ._sse import format_comment, format_event, parse_count, parse_cursor

__all__ = ["StatusApp", "book_error"]

_STATUS_OF_CODE = {"conflict": 409, "unavailable": 503, "damaged": 500}
"""HTTP status by error code; any other code is bad input (400)."""


def book_error(error: AsyncBookError) -> JSONResponse:
    """The API's answer to a book's refusal: 404 for an unknown task or group, 503 while
    the book is unreachable, else by the error's code."""
    if isinstance(error, UnknownTaskError):
        return error_response(404, error.code, f"no task {error.task_id!r}", "taskId")
    if isinstance(error, UnknownGroupError):
        return error_response(404, "not-found", f"no group {error.group_id!r}", "groupId")
    if isinstance(error, BookUnavailableError):
        return error_response(503, "unavailable", f"the book is unreachable: {error}")
    status = _STATUS_OF_CODE.get(error.code, 400)
    return error_response(status, error.code, error.message, error.field)


def _task_id(request: Request) -> str:
    return split_task_path(raw_path(request.scope), request.query_params.get("id"))[0]


def _group_id(request: Request) -> str:
    return split_group_path(raw_path(request.scope), request.query_params.get("id"))[0]


class StatusApp:
    """Handlers over one book and its hubs; the route table (``_table``) maps method and
    path to each, and ``create_app`` mounts it."""

    def __init__(
        self,
        book: AsyncBook | Reader,
        reader: Reader,
        hub: Hub,
        keepalive: float,
        signin: bool = False,
        groups: GroupHub | None = None,
        streams: StreamSlots | None = None,
        handover: Callable[[DeliveryReceipt], Awaitable[dict[str, Any] | None]] | None = None,
    ):
        self.book = book
        self.reader = reader
        """The book, read awaited: every handler reads through it (``reader_for``)."""
        self.hub = hub
        self.groups = groups if groups is not None else GroupHub(reader)
        self.keepalive = keepalive
        self.streams = streams if streams is not None else StreamSlots()
        """The event streams open, bounded (every stream of this server takes a slot)."""
        self.signin = signin
        self.handover = handover
        """What a delivery hands over beside its receipt (``ResultApi.download``)."""
        self.console = isinstance(book, ConsoleBook)
        """True when the book keeps task info (the console's API is served then)."""
        self.fleet: Unconsumed | None = None
        """What tells the queues no online worker consumes (the server's ``QueuesApi``)."""
        self.audited = isinstance(book, AuditedBook)
        """True when the book keeps an audit trail: a cancel names its actor, and the
        trail's API is served."""

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

    async def get_group(self, request: Request) -> Response:
        group_id = _group_id(request)
        limit_text = request.query_params.get("limit")
        limit = GROUP_MEMBERS
        if limit_text not in (None, ""):
            limit = require_limit(parse_count(limit_text, "limit"))
        summary, tasks = await _group_detail(self.reader, group_id, limit)
        if summary is None:
            raise UnknownGroupError(group_id)
        return JSONResponse({**to_wire(summary), "tasks": [task_summary(t) for t in tasks]})

    async def group_stream(self, request: Request) -> Response:
        group_id = _group_id(request)
        return await self._open(self.groups.watch(group_id))

    async def get_task(self, request: Request) -> Response:
        task_id = _task_id(request)
        body = await task_answer(self.reader, task_id, self.console)
        if body is None:
            raise UnknownTaskError(task_id)
        return JSONResponse(body)

    async def events(self, request: Request) -> Response:
        task_id = _task_id(request)
        cursor = parse_cursor(request.query_params.get("cursor"), "cursor")
        result = await self.reader.resume(task_id, cursor)
        return JSONResponse(to_wire(result))

    async def deliver(self, request: Request) -> Response:
        task_id = _task_id(request)
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
        download = None
        if self.handover is not None and result.receipt is not None:
            download = await self.handover(result.receipt)
        return with_download(to_wire(result), download)

    async def cancel(self, request: Request) -> Response:
        task_id = _task_id(request)
        if cross_site(request):
            # No token, no cookie: a page on another site could post an empty body here.
            return refuse_cross_site("this change")
        body = await read_json_object(request, CANCEL_BODY_LIMIT, CANCEL_FIELDS)
        if isinstance(body, Response):
            return body
        reason = cancel_reason(body.get("reason"))
        try:
            if self.audited:  # a book without a trail may not take an actor
                result = await self.reader.cancel(task_id, reason, actor=actor_of(request))
            else:
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

    async def stream(self, request: Request) -> Response:
        task_id = _task_id(request)
        header = request.headers.get("last-event-id")
        cursor = parse_cursor(request.query_params.get("cursor"), "cursor")  # checked always
        if header is not None:
            cursor = parse_cursor(header, "Last-Event-ID")
        return await self._open(self.hub.watch(task_id, cursor))

    async def _open(self, watcher: Watcher | GroupWatcher) -> Response:
        """A stream once its first batch came; a refusal (or 503) when none could."""
        first = await watcher.queue.get()
        if isinstance(first, BaseException):
            self._unwatch(watcher)
            if isinstance(first, AsyncBookError):
                return book_error(first)
            return error_response(503, "unavailable", f"the book is unreachable: {first}")
        return self.streams.response(self._pump(first, watcher))

    def _unwatch(self, watcher: Watcher | GroupWatcher) -> None:
        if isinstance(watcher, GroupWatcher):
            self.groups.unwatch(watcher)
        else:
            self.hub.unwatch(watcher)

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
            self._unwatch(watcher)

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

        return self.streams.response(body())

    async def metrics(self, request: Request) -> Response:
        states = await self.reader.count_by_state()
        answers = await self.reader.transition_counts()
        lateness = await sweep_lateness(self.reader)
        health = await read_health(self.reader)
        names: list[NameTotals] = []
        gauges = None
        if self.console:
            names = await self.reader.name_totals()
            gauges = await self.reader.gauges(health.now_ms)
        fleet = None if self.fleet is None else await self.fleet.unconsumed()
        waiting = None if self.fleet is None else await self.fleet.stranded()
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
            gauges=gauges,
            fleet=fleet,
            stranded=waiting,
        )
        return Response(text, media_type=CONTENT_TYPE_LATEST)

    def page(self, name: str) -> Callable[[Request], Awaitable[Response]]:
        """The handler of one of the pages (``_pages``)."""

        async def page(request: Request) -> Response:
            return await self._page(name, principal_of(request))

        return page

    async def _page(self, name: str, principal: Principal | None) -> Response:
        text = await anyio.to_thread.run_sync(read_page, name)
        if principal is not None:
            text = text.replace(_BODY, f'<body data-role="{principal.role}">', 1)
        if self.signin and (principal is None or principal.by_cookie):
            text = text.replace(_SIGN_OUT_HIDDEN, _SIGN_OUT_SHOWN)
            # A change needs the bearer token (the cookie never authorizes one): ask for it.
            for action in ("cancel", "resend"):
                text = text.replace(_TOKEN_FIELD_HIDDEN % action, _TOKEN_FIELD_SHOWN % action)
        return HTMLResponse(text)


_BODY = "<body>"
"""The shell's body tag; a page read by someone says their role on it (``data-role``)."""
_SIGN_OUT_HIDDEN = '<form id="signout" method="post" action="/logout" hidden>'
_SIGN_OUT_SHOWN = '<form id="signout" method="post" action="/logout">'
_TOKEN_FIELD_HIDDEN = '<p id="%s-token-field" hidden>'
_TOKEN_FIELD_SHOWN = '<p id="%s-token-field">'


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
