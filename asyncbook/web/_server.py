"""Running the status server under uvicorn: in the foreground, or in a thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import uvicorn

from .._book import AsyncBook
from .._queues import DEFAULT_OWN_QUEUE, BrokerReader
from ..artifacts import ArtifactStore
from ..errors import invalid
from ..redis import RedisBook
from ._access import AccessRules
from ._app import create_app
from ._auth import check_bind
from ._feed import BookChangeFeed, ChangeFeed
from ._reader import Reader
from ._resend import Resending, resender_of
from ._responses import MAX_STREAMS
from ._results import ResultReading

__all__ = ["BackgroundServer", "feed_for", "serve"]


def feed_for(book: RedisBook) -> ChangeFeed:
    """The change feed of ``book``: its channel (a sharded book's: every shard's),
    followed through the book's own client."""
    if book.shards > 1:
        return BookChangeFeed(book.client, book.change_channels)
    return BookChangeFeed(book.client, book.keys.changes_channel)


MAX_HEAD_BYTES = 64 * 1024
"""Largest request line plus headers; past it the server answers 400 and closes."""


def _server(
    app: Any,
    host: str,
    port: int,
    log_level: str,
    proxy_headers: bool = False,
    forwarded_allow_ips: str | list[str] | None = None,
) -> uvicorn.Server:
    # h11, not httptools: httptools has no limit on a request's headers (a 48 MiB header
    # was buffered whole, stalling every client for seconds); h11 refuses past the limit.
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        timeout_graceful_shutdown=2,
        http="h11",
        h11_max_incomplete_event_size=MAX_HEAD_BYTES,
        proxy_headers=proxy_headers,
        forwarded_allow_ips=forwarded_allow_ips,
    )
    return uvicorn.Server(config)


_WILDCARDS = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}
"""Addresses that bind every interface, and the loopback address to show for each."""


def _with_bind_name(host: str, allowed_hosts: Iterable[str]) -> list[str]:
    """The allowed hosts, plus the address the server binds unless it is a wildcard."""
    names = list(allowed_hosts)
    if host not in _WILDCARDS:
        names.append(host)
    return names


def _checked(
    host: str, token: str | None, access: AccessRules | None, proxy_headers: bool
) -> AccessRules:
    """The server's access rules, refused when they cannot hold: beyond loopback without
    any, or a trusted header with ``proxy_headers`` (which replaces the peer address the
    header's proxies are checked against by X-Forwarded-For's)."""
    if access is not None and token is not None:
        raise invalid(
            "give the token in access (AccessRules.of(token=...)), not both", field="token"
        )
    rules = access if access is not None else AccessRules.of(token)
    if rules.header is not None and proxy_headers:
        raise invalid(
            "--trusted-header checks the proxy's own address, which --proxy-headers replaces "
            "by X-Forwarded-For: use one of them",
            field="trusted_header",
        )
    check_bind(host, rules.enabled)
    return rules


def _url(host: str, port: int) -> str:
    """The page's URL: a wildcard bind is shown as loopback, a name the server answers for."""
    host = _WILDCARDS.get(host, host)
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


def serve(
    book: AsyncBook | Reader,
    feed: ChangeFeed | None,
    *,
    host: str = "127.0.0.1",
    port: int = 5566,
    token: str | None = None,
    log_level: str = "info",
    on_ready: Callable[[str], None] | None = None,
    allowed_hosts: Iterable[str] = (),
    proxy_headers: bool = False,
    forwarded_allow_ips: str | list[str] | None = None,
    broker: BrokerReader | None = None,
    own_queue: str = DEFAULT_OWN_QUEUE,
    resender: Resending | None = None,
    retrier: Resending | None = None,
    access: AccessRules | None = None,
    max_streams: int = MAX_STREAMS,
    artifacts: ArtifactStore | None = None,
    results_elsewhere: ResultReading | None = None,
) -> None:
    """Serve until interrupted; without ``token`` (or ``access``) only a loopback
    ``host`` is allowed.

    ``allowed_hosts`` are the names clients may reach it by besides loopback names (and
    ``host`` itself); ``proxy_headers`` trusts ``X-Forwarded-For``/``-Proto`` from
    ``forwarded_allow_ips`` (uvicorn's default: 127.0.0.1, or env FORWARDED_ALLOW_IPS).
    ``access``: roles instead of the one ``token``; ``broker``, ``own_queue`` (the queues
    page), ``resender`` (sends tasks again through the broker; ``retrier``: its old
    name), ``artifacts`` (results stored by reference), ``results_elsewhere`` and
    ``max_streams`` (event streams open at once) are ``create_app``'s.
    """
    rules = _checked(host, token, access, proxy_headers)
    names = _with_bind_name(host, allowed_hosts)
    app = create_app(
        book,
        feed,
        allowed_hosts=names,
        access=rules,
        broker=broker,
        own_queue=own_queue,
        resender=resender_of(resender, retrier),
        max_streams=max_streams,
        artifacts=artifacts,
        results_elsewhere=results_elsewhere,
    )
    server = _server(app, host, port, log_level, proxy_headers, forwarded_allow_ips)
    if on_ready is not None:
        on_ready(_url(host, port))
    server.run()


class BackgroundServer:
    """The status server in a daemon thread (the demo, benchmarks, tests).

    ``with BackgroundServer(book, feed) as server: print(server.url)``; port 0 picks a
    free one. Loopback only unless a token (or ``access``) is given.
    """

    def __init__(
        self,
        book: AsyncBook | Reader,
        feed: ChangeFeed | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        keepalive: float = 15.0,
        log_level: str = "warning",
        allowed_hosts: Iterable[str] = (),
        proxy_headers: bool = False,
        forwarded_allow_ips: str | list[str] | None = None,
        broker: BrokerReader | None = None,
        own_queue: str = DEFAULT_OWN_QUEUE,
        resender: Resending | None = None,
        retrier: Resending | None = None,
        access: AccessRules | None = None,
        max_streams: int = MAX_STREAMS,
        artifacts: ArtifactStore | None = None,
        results_elsewhere: ResultReading | None = None,
    ) -> None:
        rules = _checked(host, token, access, proxy_headers)
        names = _with_bind_name(host, allowed_hosts)
        self.app = create_app(
            book,
            feed,
            keepalive=keepalive,
            allowed_hosts=names,
            access=rules,
            broker=broker,
            own_queue=own_queue,
            resender=resender_of(resender, retrier),
            max_streams=max_streams,
            artifacts=artifacts,
            results_elsewhere=results_elsewhere,
        )
        self._server = _server(self.app, host, port, log_level, proxy_headers, forwarded_allow_ips)
        self._host = host
        self._thread = threading.Thread(target=self._server.run, daemon=True, name="asyncbook-web")
        self.url = ""

    def start(self, timeout: float = 10.0) -> str:
        """Start serving; returns the page's URL once the socket listens."""
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise invalid("the status server did not start", field="port")
            time.sleep(0.01)
        port = self._server.servers[0].sockets[0].getsockname()[1]
        self.url = _url(self._host, port)
        return self.url

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving (open streams end) and wait for the thread."""
        self._server.should_exit = True
        self._thread.join(timeout)

    def __enter__(self) -> BackgroundServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
