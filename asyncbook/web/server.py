"""Running the status server under uvicorn: in the foreground, or in a thread."""

from __future__ import annotations

import importlib
import threading
import time
from collections.abc import Callable
from typing import Any

import uvicorn

from ..book import AsyncBook
from ..errors import invalid
from ..redis_book import RedisBook
from .app import create_app
from .auth import check_bind
from .feed import BookChangeFeed, ChangeFeed, RedisChangeFeed

__all__ = ["BackgroundServer", "feed_for", "serve"]

_ASYNC_SCHEMES = ("redis", "rediss", "unix")


def feed_for(book: RedisBook, redis_url: str | None = None) -> ChangeFeed:
    """The change feed of ``book``: from ``redis_url``, else from the book's own client.

    A plain ``redis://``, ``rediss://`` or ``unix://`` URL gets an asyncio subscriber;
    Sentinel and Cluster URLs (and a book given no URL) follow through the book's own
    client. A book on an embedded fakeredis server gets an async fakeredis client on the
    same server, so the demo's page is live without a Redis.
    """
    channel = book.keys.changes_channel
    if redis_url is not None and redis_url.split("://", 1)[0] in _ASYNC_SCHEMES:
        return RedisChangeFeed.from_url(redis_url, channel)
    kwargs = getattr(getattr(book.client, "connection_pool", None), "connection_kwargs", {})
    if "server" in kwargs:  # fakeredis: same server, given or found by host and port
        fake = importlib.import_module("fakeredis.aioredis")
        where = {key: kwargs.get(key) for key in ("server", "host", "port")}
        where = {key: value for key, value in where.items() if value is not None}
        return RedisChangeFeed(lambda: fake.FakeRedis(**where), channel)
    return BookChangeFeed(book.client, channel)


def _server(app: Any, host: str, port: int, log_level: str) -> uvicorn.Server:
    config = uvicorn.Config(
        app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=2
    )
    return uvicorn.Server(config)


def _url(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


def serve(
    book: AsyncBook,
    feed: ChangeFeed | None,
    *,
    host: str = "127.0.0.1",
    port: int = 5566,
    token: str | None = None,
    log_level: str = "info",
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve until interrupted; without ``token`` only a loopback ``host`` is allowed."""
    check_bind(host, token)
    server = _server(create_app(book, feed, token=token), host, port, log_level)
    if on_ready is not None:
        on_ready(_url(host, port))
    server.run()


class BackgroundServer:
    """The status server in a daemon thread (the demo, benchmarks, tests).

    ``with BackgroundServer(book, feed) as server: print(server.url)``; port 0 picks a
    free one. Loopback only unless a token is given.
    """

    def __init__(
        self,
        book: AsyncBook,
        feed: ChangeFeed | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        keepalive: float = 15.0,
        log_level: str = "warning",
    ) -> None:
        check_bind(host, token)
        self.app = create_app(book, feed, token=token, keepalive=keepalive)
        self._server = _server(self.app, host, port, log_level)
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
