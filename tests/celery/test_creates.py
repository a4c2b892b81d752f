"""``Creates``: a publisher's creates are written at once and answered later; while
Redis is down they wait in a thread that retries, and land when it is back."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest
import redis

from asyncbook import CreateSpec, RedisBook
from asyncbook.celery._creates import Creates
from asyncbook.redis import KeySchema, connect, retry_policy

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


def test_the_first_create_on_a_fresh_server_lands_without_more_publishes(
    tmp_path: Path,
) -> None:
    # It used to wait for 63 more creates or a flush: its EVALSHA answered NOSCRIPT (the
    # server had never seen create.lua), and that answer was read only then.
    port = free_port()
    with redis_server(tmp_path / "redis", "--port", str(port)):
        client = redis.Redis(port=port)
        wait_until(client.ping, what="redis")
        book = RedisBook(client, namespace="creates-fresh")
        other = redis.Redis(port=port)  # another process's view: no settle on these creates
        creates = Creates(lambda: book, retry_for=5.0)
        creates.add(CreateSpec("first", 0, 60_000, 1, exist_ok=True))
        try:
            task = KeySchema("creates-fresh").task("first")
            wait_until(lambda: other.exists(task), seconds=3, what="first create")
        finally:
            creates.close()
            client.close()
            other.close()


@pytest.mark.long
@pytest.mark.parametrize("flush", ["script_flush", "function_flush"])
def test_a_create_after_a_script_flush_lands_without_more_publishes(
    tmp_path: Path, flush: str
) -> None:
    """Issue 18's case: a flush on the sender's open connection, then one create and no
    more: the settler reads its NOSCRIPT answer a moment later, and it goes again by EVAL
    (it used to wait for 63 more creates, or a flush)."""
    port = free_port()
    with redis_server(tmp_path / "redis", "--port", str(port)):
        client = redis.Redis(port=port)
        wait_until(client.ping, what="redis")
        book = RedisBook(client, namespace="creates-noscript")
        other = redis.Redis(port=port)  # another process's view: no settle on this one's creates
        key = KeySchema("creates-noscript").task
        creates = Creates(lambda: book, retry_for=5.0)
        creates.add(CreateSpec("first", 0, 60_000, 1, exist_ok=True))
        wait_until(lambda: other.exists(key("first")), seconds=5, what="the first create")
        getattr(client, flush)()  # on the sender's open connection: it does not know
        creates.add(CreateSpec("second", 0, 60_000, 1, exist_ok=True))
        try:
            wait_until(lambda: other.exists(key("second")), seconds=2, what="the create")
        finally:
            creates.close()
            client.close()
            other.close()


def test_a_process_exiting_while_the_book_is_down_waits_its_exit_wait_and_says_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # It used to wait retry_for + 1 s (11 s by default) and log every retry (13 lines).
    port = free_port()  # nobody listens: the book is down
    book = RedisBook(
        connect(
            f"redis://127.0.0.1:{port}/0",
            socket_timeout=0.5,
            socket_connect_timeout=0.5,
            retry=retry_policy(0),
        ),
        namespace="creates-exit",
    )
    creates = Creates(lambda: book, retry_for=10.0, exit_wait=0.5)
    with caplog.at_level(logging.DEBUG, "asyncbook.celery"):
        creates.add(CreateSpec("left", 0, 60_000, 1, exist_ok=True))
        began = time.monotonic()
        creates.flush_at_exit()
        took = time.monotonic() - began
    assert 0.4 <= took < 1.5
    loud = [record for record in caplog.records if record.levelno >= logging.WARNING]
    assert len(loud) == 2, [record.getMessage() for record in loud]
    assert "retrying for up to 10.0 s" in loud[0].getMessage()
    assert "exiting with 1 create(s) unsent after 0.5 s" in loud[1].getMessage()
    assert "left" in loud[1].getMessage()
    book.client.close()
