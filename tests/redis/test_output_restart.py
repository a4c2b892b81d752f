"""An output stream survives a Redis crash with AOF (``appendfsync always``): a reader
that comes back with its cursor gets every chunk after it, none twice, and appends go
on numbering from where they stopped."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

from asyncbook import DamagedRecordError, RedisBook, StartEvent

from ..support.books import delete_namespace, redis_client
from ..support.servers import free_port, wait_until

pytestmark = pytest.mark.redis


@contextmanager
def aof_server(folder: Path, port: int) -> Iterator[subprocess.Popen[bytes]]:
    """A loopback redis-server writing every write to its AOF before answering."""
    process = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "yes", "--appendfsync", "always", "--dir", str(folder)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        client = redis.Redis(port=port)
        wait_until(lambda: client.ping() and not client.info("persistence")["loading"])
        client.close()
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
        process.wait(10)


def test_a_cursor_resumes_exactly_after_a_crash(tmp_path: Path) -> None:
    port = free_port()
    with aof_server(tmp_path, port) as server:
        book = RedisBook(redis.Redis(port=port), namespace="aof")
        book.create(id="t", now_ms=book.now_ms(), ttl_ms=10**9, max_attempts=1)
        book.apply("t", StartEvent(at_ms=book.now_ms(), worker="w"))
        book.append_output("t", *[f"c{n}" for n in range(5)])
        seen = book.output("t", 0, limit=2)
        server.send_signal(signal.SIGKILL)  # a crash: only the AOF is left
        server.wait(10)
        book.client.close()
    with aof_server(tmp_path, port):
        again = RedisBook(redis.Redis(port=port), namespace="aof")
        rest = again.output("t", seen.cursor)
        assert [c.chunk for c in seen.chunks + rest.chunks] == [f"c{n}" for n in range(5)]
        assert [c.seq for c in rest.chunks] == [3, 4, 5]
        assert again.append_output("t", "c5").cursor == 6
        assert [c.chunk for c in again.output("t", 5).chunks] == ["c5"]
        again.client.close()


def test_a_damaged_record_is_told_and_nothing_written(namespace: str) -> None:
    client = redis_client()
    book = RedisBook(client, namespace=namespace)
    try:
        book.create(id="d", now_ms=book.now_ms(), ttl_ms=10**9, max_attempts=1)
        book.apply("d", StartEvent(at_ms=book.now_ms(), worker="w"))
        client.hdel(book.keys.task("d"), "att")  # a field lost behind the book's back
        with pytest.raises(DamagedRecordError):
            book.append_output("d", "x")
        with pytest.raises(DamagedRecordError):
            book.output("d")
        assert not client.exists(book.keys.output("d"))
    finally:
        delete_namespace(client, namespace)
        client.close()
