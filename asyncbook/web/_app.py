"""The status server: a JSON API, task and group streams, metrics and the pages (Starlette).

``create_app`` mounts the route table (``_table``) over one book, its hubs and its change
feed, with the error handlers and the middleware (Host check, session, access).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles

from .._book import AsyncBook
from .._queues import DEFAULT_OWN_QUEUE, BrokerReader
from ..artifacts import ArtifactStore
from ..errors import AsyncBookError, BookUnavailableError, invalid
from ._access import Access, AccessRules
from ._feed import Change, ChangeFeed, LocalChangeFeed
from ._groups import GroupHub
from ._handlers import StatusApp, book_error
from ._hosts import HostCheck, allowed_host_names
from ._hub import Hub
from ._login import Login, Sessions
from ._queues import QueuesApi
from ._reader import Reader, close_reader, reader_for
from ._resend import ResendApi, Resending, resender_of
from ._responses import MAX_STREAMS, StreamSlots, error_response
from ._results import ResultApi, ResultReading
from ._routes import open_paths, page_paths, starlette_routes
from ._session_store import session_store_for
from ._table import route_table
from ._throttle import FailureThrottle

__all__ = ["create_app"]

log = logging.getLogger(__name__)

KEEPALIVE_SECONDS = 15.0
_UNAVAILABLE = (BookUnavailableError, ConnectionError, TimeoutError)


async def _on_book_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, AsyncBookError)
    return book_error(error)


async def _on_http_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)
    codes = {404: "not-found", 405: "method-not-allowed", 413: "too-large"}
    code = codes.get(error.status_code, "http-error")
    message = str(error.detail)
    allow = (error.headers or {}).get("Allow")
    if error.status_code == 405 and allow:
        message = f"{request.method} is not allowed here; use {allow}"
    # The library's headers travel with it: every 405 says what is Allowed.
    return error_response(error.status_code, code, message, headers=error.headers)


async def _on_disconnect(request: Request, error: Exception) -> Response:
    """The client went away mid-body: nobody is left to answer, so nothing to log."""
    return Response(status_code=400)


async def _on_unavailable(request: Request, error: Exception) -> Response:
    return error_response(503, "unavailable", f"the book is unreachable: {error}")


async def check_server_at_start(reader: Reader) -> None:
    """The book's server checked once as the server starts, as a first write would (a
    ``maxmemory-policy`` that may evict is warned about), so that a server that only
    reads warns too; its writes then check no more. A check that fails is logged, and
    the server serves on (its requests answer what the book says)."""
    try:
        await reader.check_server(reading=True)  # a book with no server: nothing to check
    except (AsyncBookError, *_UNAVAILABLE) as error:
        log.warning("asyncbook: the book's server could not be checked at start: %s", error)


def _rules(token: str | None, access: AccessRules | None) -> AccessRules:
    if access is None:
        return AccessRules.of(token)
    if token is not None:
        raise invalid(
            "give the token in access (AccessRules.of(token=...)), not both", field="token"
        )
    return access


def create_app(
    book: AsyncBook | Reader,
    feed: ChangeFeed | None = None,
    *,
    token: str | None = None,
    keepalive: float = KEEPALIVE_SECONDS,
    allowed_hosts: Iterable[str] = (),
    access: AccessRules | None = None,
    broker: BrokerReader | None = None,
    own_queue: str = DEFAULT_OWN_QUEUE,
    resender: Resending | None = None,
    retrier: Resending | None = None,
    max_streams: int = MAX_STREAMS,
    artifacts: ArtifactStore | None = None,
    artifact_url_expiry: int = 3600,
    results_elsewhere: ResultReading | None = None,
) -> Starlette:
    """The status server over ``book``, following ``feed`` (a ``LocalChangeFeed`` if None).

    The server reads the book awaited: a ``RedisBook`` through its ``AsyncRedisBook``
    twin (``reader_for``; any client: plain Redis, Cluster, Sentinel, fakeredis), an
    ``AsyncRedisBook`` as it is, a book with no twin (``MemoryBook``) in place.

    With ``token`` set (16 characters at least) every path but ``/metrics`` (and the
    sign-in form) needs it; ``access`` (``AccessRules.of``: an operator and a read token,
    a trusted proxy's header) instead of ``token`` gives roles (docs/access.md).
    Requests are answered only when their ``Host`` is a loopback name or one of
    ``allowed_hosts`` (``*.example.com`` matches subdomains).

    ``broker`` (a ``BrokerReader``: ``asyncbook.celery.RedisBroker`` or ``AmqpBroker``,
    built by the caller: the web knows no broker's layout) is read by ``/api/queues``
    and the queues page, beside ``own_queue`` (the Celery setting ``asyncbook_queue``);
    it stays the caller's to close.
    ``resender`` sends tasks again through the broker (``asyncbook.celery.Resender``);
    without one, a resend is refused (503, ``no-broker``). ``artifacts``: the store
    results are kept in by reference (``asyncbook_artifacts``): ``/api/tasks/{id}/result``
    reads it, and a delivery hands over a presigned URL lasting ``artifact_url_expiry``
    seconds beside its receipt (docs/artifacts.md); ``results_elsewhere`` reads a result
    kept outside it (``asyncbook serve``: a Celery meta in Redis). ``retrier`` is its old name
    (deprecated; gone in 0.3.0).

    At most ``max_streams`` event streams (a task's, its output's, a group's) are open at
    once; one more is answered 503 with ``Retry-After``.
    """
    rules = _rules(token, access)
    hosts = allowed_host_names(allowed_hosts)
    resender = resender_of(resender, retrier)
    feed = feed if feed is not None else LocalChangeFeed()
    reader = reader_for(book)
    hub = Hub(reader)
    groups = GroupHub(reader)
    streams = StreamSlots(max_streams)
    results = ResultApi(reader, artifacts, artifact_url_expiry, results_elsewhere)
    status = StatusApp(
        book,
        reader,
        hub,
        keepalive,
        signin=rules.signin,
        groups=groups,
        handover=results.download,
        streams=streams,
    )

    def on_change(change: Change) -> None:
        hub.on_change(change)
        groups.on_change(change)

    def on_reset() -> None:
        hub.on_reset()
        groups.on_reset()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await check_server_at_start(reader)
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

    throttle = FailureThrottle()
    sessions = session_store_for(reader)
    queues = QueuesApi(reader, broker, own_queue, with_info=status.console)
    status.fleet = queues
    login = Login(rules, throttle, sessions)
    table = route_table(status, login, queues, ResendApi(resender), results)
    routes: list[BaseRoute] = starlette_routes(table, signin=rules.signin)
    static = StaticFiles(packages=[("asyncbook.web", "static")])
    routes.append(Mount("/static", static, name="static"))
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
    app.state.streams = streams
    app.state.feed = feed
    app.state.allowed_hosts = hosts
    app.state.login_throttle = throttle
    app.state.sessions = sessions
    app.state.access = rules
    # Added innermost first: HostCheck sees every request, then the session, then access.
    if rules.enabled:
        pages, page_prefixes = page_paths(table)
        app.add_middleware(
            Access,
            rules=rules,
            open_paths=open_paths(table),
            page_paths=pages,
            page_prefixes=page_prefixes,
            sessions=sessions if rules.signin else None,
            throttle=throttle,
        )
    if rules.signin:
        app.add_middleware(Sessions, token=rules.token, read_token=rules.read_token)
    app.add_middleware(HostCheck, allowed_hosts=hosts)
    return app
