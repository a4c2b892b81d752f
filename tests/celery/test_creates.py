"""``Creates``: a publisher's creates are written at once and answered later; while
Redis is down they wait in a thread that retries, and land when it is back."""

from __future__ import annotations

from pathlib import Path

import redis

from asyncbook import CreateSpec, RedisBook
from asyncbook.celery._creates import Creates
from asyncbook.redis import connect, retry_policy

from ..support.servers import free_port, redis_server, wait_until


def test_creates_wait_out_an_outage(tmp_path: Path) -> None:
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    book = RedisBook(
        connect(url, socket_timeout=0.5, socket_connect_timeout=0.5, retry=retry_policy(0)),
        namespace="creates",
    )
    creates = Creates(lambda: book, retry_for=15.0)
    with redis_server(tmp_path / "first", "--port", str(port)):
        wait_until(lambda: redis.Redis(port=port).ping(), what="redis")
        creates.add(CreateSpec("before", 0, 60_000, 1, exist_ok=True))
        assert creates.flush()
        assert book.get("before") is not None
    # Down: nothing is written; the creates wait in the thread, retried with backoff.
    creates.add(CreateSpec("during-1", 0, 60_000, 1, exist_ok=True))
    creates.add(CreateSpec("during-2", 0, 60_000, 1, exist_ok=True))
    assert creates.pending()
    with redis_server(tmp_path / "second", "--port", str(port)):
        wait_until(lambda: redis.Redis(port=port).ping(), what="redis")
        assert creates.flush()
        assert not creates.pending()
        assert book.get("during-1") is not None
        assert book.get("during-2") is not None
        creates.add(CreateSpec("after", 0, 60_000, 1, exist_ok=True))  # written at once again
        assert creates.flush()
        assert book.get("after") is not None
        creates.close()
    book.client.close()
