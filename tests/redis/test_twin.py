"""``AsyncRedisBook.twin_of``: an asyncio book on a client like the book's, for every
client a ``RedisBook`` takes: plain Redis, a Cluster, a Sentinel's master, fakeredis (the
same ``FakeServer``). Each twin reads what the sync book wrote and the other way round."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import fakeredis
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.sentinel

from asyncbook import AsyncState, RedisBook
from asyncbook.redis import AsyncRedisBook
from asyncbook.redis._twin import async_client_like

from ..support.books import delete_namespace
from ..support.cluster import require_binaries
from ..support.events import start
from ..support.servers import free_port, redis_server, wait_until


def both_ways(book: RedisBook) -> tuple[Any, Any]:
    """The twin's answers on what the sync book wrote (a task, its cancel by the twin),
    and the sync book's answer on the twin's cancel; the twin's client."""
    book.create(id="t/1", now_ms=book.now_ms(), ttl_ms=60_000, max_attempts=1)
    book.apply("t/1", start())
    twin = AsyncRedisBook.twin_of(book)
    assert twin is not None
    assert (twin.namespace, twin.shards, twin.retention) == (
        book.namespace,
        book.shards,
        book.retention,
    )

    async def read() -> tuple[Any, Any]:
        async with twin:
            task = await twin.get("t/1")
            assert task is not None
            await twin.cancel("t/1", "twin")
            return task.state, twin.client

    state, client = asyncio.run(read())
    cancelled = book.get("t/1")
    assert cancelled is not None
    return (state, cancelled.state), client


def test_a_fakeredis_book_has_a_twin_on_the_same_fake_server() -> None:
    book = RedisBook(fakeredis.FakeRedis(), namespace="twin")
    states, client = both_ways(book)
    assert states == (AsyncState.RUNNING, AsyncState.CANCELLED)
    assert isinstance(client, fakeredis.FakeAsyncRedis)


def test_a_fakeredis_twin_keeps_the_server_given_and_the_decoding() -> None:
    server = fakeredis.FakeServer()
    sync = fakeredis.FakeRedis(server=server, decode_responses=True)
    sync.set("k", "v")
    twin = async_client_like(sync)
    assert twin is not None

    async def read() -> Any:
        try:
            return await twin.get("k")
        finally:
            await twin.aclose()

    assert asyncio.run(read()) == "v"


def test_a_sharded_book_on_a_cluster_has_a_cluster_twin(cluster_url: str) -> None:
    namespace = f"twin-{uuid.uuid4().hex[:12]}"
    book = RedisBook.from_url(cluster_url, namespace=namespace, shards=4, socket_timeout=7.0)
    try:
        states, client = both_ways(book)
        assert states == (AsyncState.RUNNING, AsyncState.CANCELLED)
        assert isinstance(client, redis.asyncio.cluster.RedisCluster)
        node = book.client.nodes_manager.startup_nodes
        assert {(n.host, n.port) for n in client.nodes_manager.startup_nodes.values()} >= {
            (n.host, n.port) for n in node.values()
        }
        assert client.nodes_manager.connection_kwargs["socket_timeout"] == 7.0
        assert client.retry.get_retries() == book.client.retry.get_retries() == 5
    finally:
        delete_namespace(book.client, namespace)
        book.client.close()


def test_a_book_on_a_sentinel_master_has_a_sentinel_twin(tmp_path: Path) -> None:
    require_binaries()
    port, sentinel_port = free_port(), free_port()
    config = tmp_path / "sentinel.conf"
    config.write_text(f"port {sentinel_port}\nsentinel monitor books 127.0.0.1 {port} 1\n")
    with (
        redis_server(tmp_path / "master", "--port", str(port)),
        redis_server(tmp_path / "sentinel-dir", str(config), "--sentinel"),
    ):
        wait_until(
            lambda: redis.Redis(port=sentinel_port).sentinel_get_master_addr_by_name("books"),
            what="sentinel",
        )
        url = f"redis+sentinel://127.0.0.1:{sentinel_port}/books/3"
        book = RedisBook.from_url(url, namespace="twin")
        states, client = both_ways(book)
        assert states == (AsyncState.RUNNING, AsyncState.CANCELLED)
        pool = client.connection_pool
        assert isinstance(pool, redis.asyncio.sentinel.SentinelConnectionPool)
        assert (pool.service_name, pool.connection_kwargs["db"]) == ("books", 3)
        with redis.Redis(port=port, db=3) as direct:  # the master's db 3 holds it
            assert direct.exists(book.keys.task("t/1")) == 1
        book.client.close()


def test_a_client_of_another_make_has_no_twin() -> None:
    class Own(redis.Redis):
        """A client subclass: its commands may do anything."""

    assert async_client_like(Own()) is None
    assert async_client_like(object()) is None


def test_a_plain_redis_twin_keeps_the_settings() -> None:
    client = redis.Redis(host="127.0.0.1", port=1, db=4, socket_timeout=3.0, client_name="n")
    twin = async_client_like(client)
    assert twin is not None
    settings = twin.connection_pool.connection_kwargs
    assert (settings["db"], settings["socket_timeout"], settings["client_name"]) == (4, 3.0, "n")
    asyncio.run(twin.aclose())
