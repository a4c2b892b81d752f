"""What the status server checks as it starts: the book's server, once, so that a server
that only reads warns about a ``maxmemory-policy`` that may evict, as a writer does."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest
import redis

from asyncbook import RedisBook
from asyncbook.web import BackgroundServer, feed_for

from ..support.servers import free_port, redis_server, wait_until

HOUR = 3_600_000


def evictions(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "maxmemory-policy" in r.getMessage()]


@pytest.mark.parametrize("shards", [1, 2])
def test_a_server_that_only_reads_warns_once_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, shards: int
) -> None:
    port = free_port()
    with redis_server(tmp_path, "--port", str(port), "--maxmemory-policy", "allkeys-lru"):
        client = redis.Redis(port=port)
        wait_until(client.ping)
        book = RedisBook(client, namespace="evicting", shards=shards)
        assert (book.shards > 1) == (shards > 1)
        with (
            caplog.at_level(logging.WARNING, "asyncbook"),
            BackgroundServer(book, feed_for(book)) as server,
            httpx.Client(base_url=server.url, timeout=10) as http,
        ):
            assert http.get("/api/tasks").status_code == 200
            warned = evictions(caplog)
            assert len(warned) == shards  # each shard's server, once
            assert "allkeys-lru" in warned[0]
            writer = RedisBook(client, namespace="evicting", shards=shards)
            writer.create(id="t", now_ms=writer.now_ms(), ttl_ms=HOUR, max_attempts=1)
            caplog.clear()
            cancel = http.post("/api/tasks/t/cancel", json={"reason": "r"})
            assert cancel.status_code == 200, cancel.text
        assert evictions(caplog) == []  # the server's own write checks no more
        client.close()


def test_no_warning_at_start_under_noeviction(caplog: pytest.LogCaptureFixture) -> None:
    from ..support.web_server import running_server

    with caplog.at_level(logging.WARNING, "asyncbook"), running_server():
        pass
    assert evictions(caplog) == []
