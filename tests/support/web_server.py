"""A real status server on loopback for the web tests: RedisBook on the test Redis; reading
its answers (server-sent events, error bodies)."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import redis

from asyncbook import RedisBook
from asyncbook.celery import Resender
from asyncbook.redis import ShardedRedisBook
from asyncbook.web import BackgroundServer, feed_for
from asyncbook.web._paths import task_path

from .books import delete_namespace

WEB_REDIS_URL = os.environ.get("ASYNCBOOK_TEST_WEB_REDIS_URL", "redis://127.0.0.1:6379/14")


@dataclass
class Running:
    """A server that is up: its base URL (no trailing slash), its book, its app."""

    url: str
    book: RedisBook
    app: Any
    server: BackgroundServer


@contextmanager
def running_server(
    *,
    token: str | None = None,
    retention_versions: int = 8,
    client: Any = None,
    broker_url: str | None = None,
    shards: int = 1,
    **options: Any,
) -> Iterator[Running]:
    """A status server over a fresh RedisBook namespace (the test Redis unless ``client``)
    of ``shards`` shards.

    ``broker_url``: resends are sent there (a ``Resender`` on the book). ``options`` go to
    ``BackgroundServer`` (``allowed_hosts``, ``proxy_headers``...).
    """
    client = client if client is not None else redis.Redis.from_url(WEB_REDIS_URL)
    client.ping()
    namespace = f"web-{uuid.uuid4().hex[:12]}"
    book = RedisBook(
        client, namespace=namespace, retention_versions=retention_versions, shards=shards
    )
    try:
        resender = None if broker_url is None else Resender(book, broker_url)
        with BackgroundServer(
            book, feed_for(book), token=token, resender=resender, **options
        ) as server:
            wait_for_listener(book)
            yield Running(url=server.url.rstrip("/"), book=book, app=server.app, server=server)
    finally:
        delete_namespace(client, namespace)
        client.close()


def wait_for_listener(book: RedisBook, timeout: float = 5.0) -> None:
    """Block until the server's change feed is subscribed to the book's channel (each
    shard's, on a sharded book)."""
    channels = [book.keys.changes_channel]
    if isinstance(book, ShardedRedisBook):
        channels = book.change_channels
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        counts = dict(book.client.pubsub_numsub(*channels))
        if all(counts.get(channel.encode(), 0) > 0 for channel in channels):
            return
        time.sleep(0.01)
    raise RuntimeError("the change feed never subscribed")


def sse_events(response: httpx.Response) -> Iterator[dict[str, Any]]:
    """Each server-sent event as it arrives: ``{"event", "id"?, "data"}``."""
    current: dict[str, Any] = {}
    for line in response.iter_lines():
        if not line:
            if "event" in current:
                yield current
            current = {}
            continue
        name, _, value = line.partition(": ")
        if name == "event":
            current["event"] = value
        elif name == "id":
            current["id"] = int(value)
        elif name == "data":
            current["data"] = json.loads(value)


def read_sse(response: httpx.Response) -> list[dict[str, Any]]:
    """Parse a whole server-sent event stream into ``{"event", "id", "data"}`` dicts."""
    return list(sse_events(response))


def assert_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """The error body of ``response``, checked: its status, its ``code``, a message."""
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert body["code"] == code
    assert isinstance(body["message"], str)
    assert body["message"]
    return body


def get_raw(client: httpx.Client, base: str, raw_path: str) -> httpx.Response:
    """``GET raw_path`` as given (httpx normalises nothing), streamed: a path that opens a
    live stream answers at once with its status and headers; an error's body is read."""
    target = httpx.URL(base).copy_with(raw_path=raw_path.encode())
    response = client.send(client.build_request("GET", target), stream=True)
    try:
        if response.status_code >= 400:
            response.read()
    finally:
        response.close()
    return response


def output_events(
    client: httpx.Client, task_id: str, cursor: int, take: int
) -> list[dict[str, Any]]:
    """Up to ``take`` events of the task's ``output-stream`` after ``cursor`` (sent as
    ``Last-Event-ID``), up to its ``end``; then hang up."""
    seen: list[dict[str, Any]] = []
    headers = {"Last-Event-ID": str(cursor)}
    with client.stream("GET", task_path(task_id, "output-stream"), headers=headers) as response:
        assert response.status_code == 200
        for event in sse_events(response):
            seen.append(event)
            if event["event"] == "end" or len(seen) >= take:
                break
    return seen
