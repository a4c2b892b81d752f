"""The status server reads its book awaited: a RedisBook through an AsyncRedisBook twin
of its client (no threads; on fakeredis too), an AsyncRedisBook as given, a MemoryBook in
place."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any

import fakeredis
import httpx
import redis

from asyncbook import AsyncRedisBook, MemoryBook, RedisBook
from asyncbook.web import BackgroundServer, LocalChangeFeed, create_app
from asyncbook.web._reader import InPlaceReader, reader_for

from ..support.books import delete_namespace
from ..support.web_server import WEB_REDIS_URL

NOW = int(time.time() * 1000)


def test_a_redis_book_is_read_through_an_async_twin_of_its_client() -> None:
    client = redis.Redis.from_url(WEB_REDIS_URL, socket_timeout=3.0, client_name="twin")
    book = RedisBook(client, namespace="twin", retention_versions=5)
    reader = reader_for(book)
    assert isinstance(reader, AsyncRedisBook)
    assert (reader.namespace, reader.retention_versions, reader.retention) == (
        "twin",
        5,
        book.retention,
    )
    settings = reader.client.connection_pool.connection_kwargs
    db = client.connection_pool.connection_kwargs["db"]  # 14 unless the environment says
    assert (settings["db"], settings["socket_timeout"], settings["client_name"]) == (db, 3, "twin")
    client.close()


def test_books_without_an_async_twin_are_read_through_their_sync_calls() -> None:
    memory = reader_for(MemoryBook())
    assert isinstance(memory, InPlaceReader)
    assert reader_for(memory) is memory
    given = AsyncRedisBook.from_url(WEB_REDIS_URL)
    assert reader_for(given) is given


def test_a_fakeredis_book_is_read_through_a_twin_on_its_fake_server() -> None:
    """Every Redis book has a twin now (issue 31): fakeredis's reads what the book wrote."""
    fake = RedisBook(fakeredis.FakeRedis(), namespace="fake")
    fake.create(id="f", now_ms=NOW, ttl_ms=10_000_000, max_attempts=1)
    reader = reader_for(fake)
    assert isinstance(reader, AsyncRedisBook)
    assert isinstance(reader.client, fakeredis.FakeAsyncRedis)

    async def read() -> Any:
        try:
            return await reader.get("f")
        finally:
            await reader.aclose()

    assert asyncio.run(read()) == fake.get("f")


def test_the_server_reads_a_redis_book_without_threads() -> None:
    """Every read the JSON API makes runs on the server's loop: no worker thread starts."""
    client = redis.Redis.from_url(WEB_REDIS_URL)
    namespace = f"web-{uuid.uuid4().hex[:12]}"
    book = RedisBook(client, namespace=namespace)
    book.create(id="t", now_ms=NOW, ttl_ms=10_000_000, max_attempts=1)
    before = set(threading.enumerate())  # the threads themselves: a new one may reuse an id
    try:
        with (
            BackgroundServer(book, LocalChangeFeed()) as server,
            httpx.Client(base_url=server.url, timeout=10) as http,
        ):
            for path in ("api/tasks", "api/tasks/t", "api/tasks/t/events", "api/search"):
                assert http.get(path).status_code == 200, path
            assert http.get("metrics").status_code == 200
            assert http.get("api/health").json()["overdueTasks"] == 0
            assert http.post("api/tasks/t/cancel", json={}).status_code == 200
            started = [t for t in threading.enumerate() if t not in before]
    finally:
        delete_namespace(client, namespace)
        client.close()
    assert [t.name for t in started] == ["asyncbook-web"]  # the server's own thread only


def test_an_async_book_serves_the_api_as_given(namespace: str) -> None:
    sync_book = RedisBook(redis.Redis.from_url(WEB_REDIS_URL), namespace=namespace)
    sync_book.create(id="a", now_ms=NOW, ttl_ms=10_000_000, max_attempts=1)

    async def scenario() -> list[Any]:
        async with AsyncRedisBook.from_url(WEB_REDIS_URL, namespace=namespace) as book:
            app = create_app(book, LocalChangeFeed())
            transport = httpx.ASGITransport(app=app)
            async with (
                app.router.lifespan_context(app),
                httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http,
            ):
                task = (await http.get("/api/tasks/a")).json()
                missing = (await http.get("/api/tasks/nobody")).status_code
                names = (await http.get("/api/names")).status_code
            return [task, missing, names, await book.get("a")]

    try:
        task, missing, names, still = asyncio.run(scenario())
    finally:
        delete_namespace(sync_book.client, namespace)
        sync_book.client.close()
    assert task["id"] == "a"
    assert task["info"]["id"] == "a"
    assert (missing, names) == (404, 200)
    assert still is not None  # the server left the caller's book open
