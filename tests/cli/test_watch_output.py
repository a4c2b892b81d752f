"""``asyncbook watch ID --output``: the task's output until it ends, from Redis and
through a status server's output stream, from a cursor."""

from __future__ import annotations

import json
import threading
import time

from asyncbook import FailEvent, RedisBook, StartEvent, SucceedEvent
from asyncbook.web import BackgroundServer, feed_for

from ..support.cli import run

NOW = 1_000_000


def write(book: RedisBook, task_id: str) -> None:
    """Two attempts' output, then success."""
    book.append_output(task_id, "Hel", "lo")
    time.sleep(0.2)
    book.apply(task_id, FailEvent(at_ms=NOW + 2, error="x", retryable=True))
    book.apply(task_id, StartEvent(at_ms=NOW + 3, worker="w"))
    book.append_output(task_id, "Hello, \x1b[31mworld")
    book.apply(task_id, SucceedEvent(at_ms=NOW + 4, result_ref="r", result_hash="h"))


def started(book: RedisBook, task_id: str) -> None:
    book.create(id=task_id, now_ms=NOW, ttl_ms=10**9, max_attempts=2)
    book.apply(task_id, StartEvent(at_ms=NOW + 1, worker="w"))


def test_watch_output_from_redis(book: RedisBook) -> None:
    started(book, "o")
    threading.Timer(0.2, write, args=(book, "o")).start()
    result = run(book, "watch", "o", "--output")
    assert result.exit_code == 0, result.output
    assert result.stdout == "Hello\nHello, \\x1b[31mworld\n"  # control characters escaped
    assert "[attempt 1]" in result.stderr
    assert "[attempt 2]" in result.stderr
    assert "[o: succeeded, 3 chunks]" in result.stderr
    again = run(book, "watch", "o", "--output", "--json", "--cursor", "2")
    lines = [json.loads(line) for line in again.stdout.splitlines()]
    assert [(line["event"], line.get("seq"), line.get("attempt")) for line in lines] == [
        ("output", 3, 2),
        ("end", None, None),
    ]
    assert run(book, "watch", "nope", "--output").exit_code == 1


def test_watch_output_through_the_server(book: RedisBook) -> None:
    started(book, "via/api")
    with BackgroundServer(book, feed_for(book)) as server:
        threading.Timer(0.2, write, args=(book, "via/api")).start()
        result = run(book, "watch", "via/api", "--output", "--json", "--api", server.url)
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line.get("chunk") for line in lines[:-1]] == ["Hel", "lo", "Hello, \x1b[31mworld"]
    assert lines[-1] == {"event": "end", "taskId": "via/api", "state": "succeeded", "cursor": 3}
