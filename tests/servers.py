"""A real status server on loopback for tests: uvicorn in a thread, RedisBook on Redis."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import redis
import uvicorn

from asyncbook import RedisBook
from asyncbook.web import RedisChangeFeed, create_app

WEB_REDIS_URL = os.environ.get("ASYNCBOOK_TEST_WEB_REDIS_URL", "redis://127.0.0.1:6379/14")


@dataclass
class Running:
    """A server that is up: its base URL, its book, its app."""

    url: str
    book: RedisBook
    app: Any


def delete_namespace(client: Any, namespace: str) -> None:
    """Remove every key of one namespace."""
    keys = list(client.scan_iter(match="{" + namespace + "}:*", count=1000))
    if keys:
        client.delete(*keys)


@contextmanager
def serve_app(app: Any) -> Iterator[str]:
    """Run ``app`` on a free loopback port; yields its base URL."""
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, log_level="warning", timeout_graceful_shutdown=1
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@contextmanager
def running_server(
    *, token: str | None = None, retention_versions: int = 8, keepalive: float = 15.0
) -> Iterator[Running]:
    """A status server over a fresh RedisBook namespace on the test Redis."""
    client = redis.Redis.from_url(WEB_REDIS_URL)
    client.ping()
    namespace = f"web-{uuid.uuid4().hex[:12]}"
    book = RedisBook(client, namespace=namespace, retention_versions=retention_versions)
    feed = RedisChangeFeed.from_url(WEB_REDIS_URL, book.keys.changes_channel)
    app = create_app(book, feed, token=token, keepalive=keepalive)
    try:
        with serve_app(app) as url:
            wait_for_listener(app)
            yield Running(url=url, book=book, app=app)
    finally:
        delete_namespace(client, namespace)
        client.close()


def wait_for_listener(app: Any, timeout: float = 5.0) -> None:
    """Block until the app's change feed is subscribed (its first reset came)."""
    client = redis.Redis.from_url(WEB_REDIS_URL)
    channel = app.state.book.keys.changes_channel
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            counts = dict(client.pubsub_numsub(channel))
            if counts.get(channel.encode(), 0) > 0:
                return
            time.sleep(0.01)
    finally:
        client.close()
    raise RuntimeError("the change feed never subscribed")
