"""The test Redis and the books on it: its URL, a client that fails the test when the
server does not answer, a book on a fakeredis server of its own, removing one namespace's
keys afterwards, and a client flushing the server's scripts meanwhile."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import fakeredis
import pytest
import redis
import redis.asyncio

from asyncbook import AsyncBook, RedisBook
from asyncbook.redis import connect, connect_async

BookFactory = Callable[..., AsyncBook]
"""What the ``make_book`` fixture gives: keyword settings in, a fresh book of one kind out."""

REDIS_URL = os.environ.get("ASYNCBOOK_TEST_REDIS_URL", "redis://127.0.0.1:6379/10")


def redis_client(url: str = REDIS_URL) -> redis.Redis:
    """A client on the test Redis; fails the test when Redis does not answer."""
    client = redis.Redis.from_url(url)
    try:
        client.ping()
    except redis.ConnectionError as error:  # pragma: no cover - environment problem
        pytest.fail(f"Redis at {url} does not answer ({error}); .ci/run starts one")
    return client


def kind_client(request: pytest.FixtureRequest, kind: str) -> Any:
    """A client on the server of a book kind (``BOOK_KINDS``, ``SHARDED_KINDS`` but
    memory): the test Redis, the session's Cluster, or a fakeredis server of its own."""
    if kind in ("redis", "redis-s4"):
        return redis_client()
    if kind in ("cluster", "cluster-s16"):
        return connect(request.getfixturevalue("cluster_url"))
    return fakeredis.FakeRedis(server=fakeredis.FakeServer())


def kind_async_client(request: pytest.FixtureRequest, kind: str, sync: Any) -> Any:
    """An asyncio client of the same server as ``sync`` (``kind_client``'s), made in the
    running loop: the test Redis, the session's Cluster (``RedisCluster`` of
    ``redis.asyncio``), or the fakeredis server ``sync`` talks to."""
    if kind in ("redis", "redis-s4"):
        return redis.asyncio.Redis.from_url(REDIS_URL)
    if kind in ("cluster", "cluster-s16"):
        return connect_async(request.getfixturevalue("cluster_url"))
    return fakeredis.aioredis.FakeRedis(server=sync.connection_pool.connection_kwargs["server"])


def fakeredis_book(namespace: str) -> RedisBook:
    """A RedisBook of ``namespace`` on a fakeredis server of its own."""
    return RedisBook(fakeredis.FakeRedis(server=fakeredis.FakeServer()), namespace=namespace)


def delete_namespace(client: Any, namespace: str) -> None:
    """Remove every key of one namespace (its keys share the hash tag {namespace}, or
    the tags of its shards, {namespace{k.n})."""
    for pattern in ("{" + namespace + "}:*", "{" + namespace + "{*}:*"):
        pipe = client.pipeline(transaction=False)
        for key in client.scan_iter(match=pattern, count=1000):
            pipe.delete(key)  # one a command: a Cluster refuses a DEL across slots
        pipe.execute()


@contextmanager
def scripts_flushed() -> Iterator[None]:
    """Meanwhile another client flushes the test Redis's scripts and functions, again and
    again."""
    stop = threading.Event()

    def flush() -> None:
        flusher = redis_client()
        while not stop.is_set():
            flusher.script_flush()
            flusher.function_flush()
        flusher.close()

    flusher = threading.Thread(target=flush)
    flusher.start()
    try:
        yield
    finally:
        stop.set()
        flusher.join()
