"""The engine under a Redis book, and the keywords a book's URL constructors accept."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import redis
import redis.asyncio

from asyncbook import CreateSpec, RedisBook
from asyncbook.redis import AsyncRedisBook, connect, connect_async, retry_policy

from ..support.books import REDIS_URL

URLS = [
    REDIS_URL,
    "rediss://127.0.0.1:1/0",
    "unix:///nowhere/redis.sock",
    "redis+cluster://127.0.0.1:1/0",
    "redis+sentinel://127.0.0.1:1/service",
]
"""One URL of each kind: nothing listens at the last four, and nothing may be tried."""

MAKERS: dict[str, Callable[..., Any]] = {
    "RedisBook.from_url": RedisBook.from_url,
    "AsyncRedisBook.from_url": AsyncRedisBook.from_url,
    "connect": connect,
    "connect_async": connect_async,
}


@pytest.mark.parametrize("url", URLS, ids=["test-redis", *URLS[1:]])
@pytest.mark.parametrize("maker", MAKERS)
def test_a_misspelt_keyword_is_a_type_error_naming_it(maker: str, url: str) -> None:
    """Before, the keyword went to redis-py: a Cluster client dropped it silently, and
    the others failed at their first connection (or never, on a book never used)."""
    with pytest.raises(TypeError, match="'socket_timout'") as raised:
        MAKERS[maker](url, socket_timout=1.0)
    assert "socket_timeout" in str(raised.value)  # the setting it was likely meant to be


@pytest.mark.parametrize("maker", ["RedisBook.from_url", "AsyncRedisBook.from_url"])
def test_a_misspelt_book_setting_is_a_type_error(maker: str) -> None:
    with pytest.raises(TypeError, match=rf"{maker}\(\) .* 'namspace'.* 'namespace'\?"):
        MAKERS[maker](REDIS_URL, namspace="x")


def test_redis_settings_are_still_accepted() -> None:
    book = RedisBook.from_url(
        REDIS_URL,
        namespace=f"engine-{uuid.uuid4().hex}",
        socket_timeout=2.0,
        socket_connect_timeout=2.0,
        retry=retry_policy(1),
        health_check_interval=10,
        client_name="engine-test",
        max_connections=4,
        single_connection_client=False,
    )
    assert book.get("none") is None
    kwargs = book.client.connection_pool.connection_kwargs
    assert (kwargs["socket_timeout"], kwargs["client_name"]) == (2.0, "engine-test")


def test_the_book_holds_one_engine() -> None:
    book = RedisBook(redis.Redis.from_url(REDIS_URL), namespace=f"engine-{uuid.uuid4().hex}")
    engine = book.engine
    assert (engine.client, engine.layout, engine.keys) == (book.client, book.layout, book.keys)
    assert engine.slot_client() is book.client
    task, keys, args = engine.create_call(CreateSpec("made", 0, 1000, 1))
    assert (task.id, keys[0], args[0]) == ("made", book.keys.task("made"), "made")
    assert book.get("made") is None  # building a call writes nothing


def test_the_book_sends_its_texts_as_utf8_and_a_callers_script_as_given() -> None:
    """The engine sends the book's own KEYS and ARGV as UTF-8 bytes (redis-py encodes
    bytes cheapest); a caller's script gets its arguments as redis-py encodes them, in
    the client's own encoding."""
    client = redis.Redis.from_url(REDIS_URL, encoding="latin-1")
    book = RedisBook(client, namespace=f"engine-{uuid.uuid4().hex}")
    try:
        book.create(id="tâche", now_ms=0, ttl_ms=60_000, max_attempts=1)
        task = book.get("tâche")
        assert task is not None
        assert task.id == "tâche"
        echo = book.extra_script("return ARGV[1]")
        assert echo([book.keys.task("tâche")], ["é"]) == "é".encode("latin-1")
    finally:
        client.delete(book.keys.task("tâche"), book.keys.history("tâche"))
        client.close()


def test_the_async_book_sends_its_texts_as_utf8() -> None:
    """As the sync engine does, on the asyncio driver's steps."""

    async def scenario() -> str | None:
        client = redis.asyncio.Redis.from_url(REDIS_URL, encoding="latin-1")
        book = AsyncRedisBook(client, namespace=f"engine-{uuid.uuid4().hex}")
        try:
            await book.create(id="tâche", now_ms=0, ttl_ms=60_000, max_attempts=1)
            task = await book.get("tâche")
            return None if task is None else task.id
        finally:
            await client.delete(book.keys.task("tâche"), book.keys.history("tâche"))
            await client.aclose()

    assert asyncio.run(scenario()) == "tâche"
