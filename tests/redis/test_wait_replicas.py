"""``wait_replicas``: each write of a book waits for a replica (WAIT in its round trip)
and raises ``NotReplicatedError`` when none acknowledged it in time; off, no WAIT is
sent. On a loopback primary and replica of their own."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from asyncbook import AsyncBookError, CreateSpec, NotReplicatedError, RedisBook
from asyncbook.redis import AsyncRedisBook
from asyncbook.redis._resends import claim_resends

from ..support.cluster import require_binaries
from ..support.events import fail, progress, start, succeed
from ..support.servers import primary_and_replica

Pair = tuple[redis.Redis, redis.Redis, subprocess.Popen[bytes]]


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    """A primary and its replica, in sync."""
    require_binaries()
    with primary_and_replica(tmp_path) as servers:
        yield servers


def book_on(primary: redis.Redis, replicas: int, timeout_ms: int = 2000) -> RedisBook:
    port = primary.connection_pool.connection_kwargs["port"]
    return RedisBook.from_url(
        f"redis://127.0.0.1:{port}",
        namespace="w",
        wait_replicas=replicas,
        wait_timeout_ms=timeout_ms,
    )


def waits(primary: redis.Redis) -> int:
    """How many WAIT commands the primary has run."""
    stats = primary.info("commandstats")
    return int(stats.get("cmdstat_wait", {}).get("calls", 0))


def test_each_write_is_on_the_replica_when_it_returns(pair: Pair) -> None:
    primary, replica, _ = pair
    book = book_on(primary, 1)

    def state_on_replica(task_id: str) -> object:
        return replica.hget(book.keys.task(task_id), "st")

    writes: list[tuple[str, Callable[[], object], Callable[[], bool]]] = [
        ("create", lambda: book.create(id="a", now_ms=0, ttl_ms=60_000, max_attempts=2),
         lambda: state_on_replica("a") == b"queued"),
        ("create_many", lambda: book.create_many([CreateSpec("b", 0, 60_000, 1)]),
         lambda: state_on_replica("b") == b"queued"),
        ("apply", lambda: book.apply("a", start(1)),
         lambda: state_on_replica("a") == b"running"),
        ("apply_many", lambda: book.apply_many([("a", progress(50, 2), None)]),
         lambda: replica.hget(book.keys.task("a"), "prog") == b"50"),
        ("cancel", lambda: book.cancel("b", at_ms=2),
         lambda: state_on_replica("b") == b"cancelled"),
        ("sweep", lambda: book.expire_many(["a"]),
         lambda: state_on_replica("a") == b"expired"),
    ]  # fmt: skip
    for name, write, seen in writes:
        before = waits(primary)
        write()
        assert seen(), name
        assert waits(primary) > before, name
    before = waits(primary)
    book.get("a")
    assert waits(primary) == before


def test_async_book_waits_too(pair: Pair) -> None:
    primary, replica, _ = pair
    port = primary.connection_pool.connection_kwargs["port"]

    book = book_on(primary, 0)
    book.create(id="x", now_ms=0, ttl_ms=60_000, max_attempts=1)

    async def cancel() -> None:
        url = f"redis://127.0.0.1:{port}"
        async with AsyncRedisBook.from_url(url, namespace="w", wait_replicas=1) as twin:
            await twin.cancel("x", at_ms=1)
            after_cancel = waits(primary)
            await twin.get("x")
            assert waits(primary) == after_cancel > 0

    asyncio.run(cancel())
    assert replica.hget(book.keys.task("x"), "st") == b"cancelled"


def test_no_replica_in_time_raises(pair: Pair) -> None:
    primary, _, replica_process = pair
    # Writes while the replica runs wait long enough for a busy machine; those while it
    # is stopped, 200 ms.
    patient, book = book_on(primary, 1, timeout_ms=10_000), book_on(primary, 1, timeout_ms=200)
    patient.create(id="a", now_ms=0, ttl_ms=60_000, max_attempts=1)
    patient.create(id="r", now_ms=0, ttl_ms=60_000, max_attempts=1)
    patient.apply("r", start(1))
    patient.apply("r", fail(2))
    replica_process.send_signal(signal.SIGSTOP)
    try:
        with pytest.raises(NotReplicatedError) as caught:
            book.apply("a", start(1), callback_id="cb-1")
        with pytest.raises(NotReplicatedError):
            book.apply_many([("a", progress(50, 2), None)])
        with pytest.raises(NotReplicatedError):
            # the console's resend (resend.lua, pipelined): "r" kept no message, so the
            # one write is the refusal's audit entry (a resend that writes nothing sends
            # no WAIT since resends became a plan)
            claim_resends(book.engine, ["r"], actor="ops")
        with pytest.raises(NotReplicatedError):
            book.create_many([CreateSpec("c", 0, 60_000, 1)])
    finally:
        replica_process.send_signal(signal.SIGCONT)
    error = caught.value
    assert isinstance(error, AsyncBookError)
    assert (error.code, error.wanted, error.acknowledged) == ("unavailable", 1, 0)
    # The primary has the write: a retry with the same callback id changes nothing.
    assert patient.apply("a", start(1), callback_id="cb-1").changed is False
    assert patient.apply("a", succeed(2)).task.state == "succeeded"


def test_off_sends_no_wait(pair: Pair) -> None:
    primary, _, _ = pair
    book = book_on(primary, 0)
    book.create(id="a", now_ms=0, ttl_ms=60_000, max_attempts=1)
    book.apply_many([("a", start(1), None)])
    book.apply("a", succeed(2))
    assert waits(primary) == 0


@pytest.mark.parametrize(
    ("replicas", "timeout_ms", "field"),
    [(-1, 1000, "wait_replicas"), (1, 0, "wait_timeout_ms"), (True, 1000, "wait_replicas")],
)
def test_bad_settings_are_refused(replicas: int, timeout_ms: int, field: str) -> None:
    with pytest.raises(AsyncBookError, match=field) as refused:
        RedisBook.from_url(
            "redis://127.0.0.1:1",
            namespace="w",
            wait_replicas=replicas,
            wait_timeout_ms=timeout_ms,
        )
    assert refused.value.field == field


def test_on_a_cluster_wait_goes_to_the_books_node(cluster_url: str, namespace: str) -> None:
    # The session's cluster has no replicas: every write, sent with WAIT to the node of
    # the book's slot, is refused after the timeout (and still happened on the primary).
    book = RedisBook.from_url(cluster_url, namespace=namespace, wait_replicas=1, wait_timeout_ms=50)
    with pytest.raises(NotReplicatedError):
        book.create(id="a", now_ms=0, ttl_ms=60_000, max_attempts=1)
    with pytest.raises(NotReplicatedError):
        book.apply_many([("a", start(1), "cb-1")])
    task = book.get("a")
    assert task is not None
    assert task.state == "running"
