"""The optional capabilities of the ``AsyncBook`` protocol: a ``MemoryBook`` answers
"not this book" (None), a ``RedisBook`` on plain Redis has each of them."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest
import redis

from asyncbook import AsyncBook, MemoryBook, RedisBook
from asyncbook._book import CreateSpec
from asyncbook.errors import AsyncBookError
from asyncbook.redis import AsyncRedisBook

from ..support.books import REDIS_URL, delete_namespace, redis_client


@pytest.fixture
def redis_book(namespace: str) -> Iterator[RedisBook]:
    client = redis_client()
    yield RedisBook(client, namespace=namespace)
    delete_namespace(client, namespace)
    client.close()


def test_a_memory_book_has_none_of_the_optional_capabilities() -> None:
    book = MemoryBook()
    assert book.create_sender() is None
    assert book.async_twin() is None
    assert book.script_beside(redis_client(), "return 1") is None
    assert book.watch_cancels(print, on_subscribe=lambda: None, stop=lambda: True) is None


@pytest.mark.parametrize("kind", ["memory", "redis"])
def test_create_many_answers_each_spec_in_place(kind: str, redis_book: RedisBook) -> None:
    book: AsyncBook = MemoryBook() if kind == "memory" else redis_book
    book.create(id="taken", now_ms=0, ttl_ms=60_000, max_attempts=1)
    results = book.create_many(
        [
            CreateSpec("new", 0, 60_000, 1),
            CreateSpec("taken", 0, 60_000, 1),
            CreateSpec("bad", 0, 60_000, 0),
            CreateSpec("taken", 0, 60_000, 1, exist_ok=True),
        ]
    )
    assert not isinstance(results[0], AsyncBookError)
    assert results[0].id == "new"
    assert isinstance(results[1], AsyncBookError)
    assert results[1].code == "conflict"
    assert isinstance(results[2], AsyncBookError)
    assert results[2].field == "maxAttempts"
    assert not isinstance(results[3], AsyncBookError)
    assert results[3].id == "taken"


def test_a_redis_book_follows_its_cancels(redis_book: RedisBook) -> None:
    redis_book.create(id="t", now_ms=redis_book.now_ms(), ttl_ms=60_000, max_attempts=1)
    cancelled: list[str] = []
    subscribed = threading.Event()
    stop = threading.Event()
    follow = redis_book.watch_cancels(
        cancelled.append, on_subscribe=subscribed.set, stop=stop.is_set
    )
    assert follow is not None
    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    try:
        assert subscribed.wait(5)
        redis_book.cancel("t", "enough")
        for _ in range(100):
            if cancelled:
                break
            threading.Event().wait(0.05)
        assert cancelled == ["t"]
    finally:
        stop.set()
        thread.join(5)


def test_a_redis_book_has_an_async_twin_and_scripts_beside_its_server(
    redis_book: RedisBook,
) -> None:
    twin = redis_book.async_twin()
    assert isinstance(twin, AsyncRedisBook)
    assert twin.namespace == redis_book.namespace
    asyncio.run(twin.aclose())
    same = redis.Redis.from_url(REDIS_URL)
    other = redis.Redis.from_url(REDIS_URL.rsplit("/", 1)[0] + "/11")
    try:
        beside = redis_book.script_beside(same, "return {'ok', '', {}}")
        assert beside is not None
        assert beside.retention == redis_book.retention
        assert redis_book.script_beside(other, "return 1") is None
    finally:
        same.close()
        other.close()
