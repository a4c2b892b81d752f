"""The hub on an in-memory book with a local change feed: who is sent what, and when."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import httpx
import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from asyncbook import MemoryBook, ProgressEvent, RedisBook, StartEvent, SucceedEvent
from asyncbook.redis import parse_change
from asyncbook.web import BackgroundServer, Change, LocalChangeFeed
from asyncbook.web import _hub as hub_module
from asyncbook.web._hub import Batch, Hub
from asyncbook.web._paths import task_path

from ..support.servers import free_port

NOW = 1_000


def publish_all(book: MemoryBook, feed: LocalChangeFeed, task_id: str) -> None:
    task = book.get(task_id)
    assert task is not None
    feed.publish(Change(task_id, task.version, task.state.value, task.progress))


def read_stream(base: str, task_id: str, headers: dict[str, str], out: list[Any]) -> None:
    with (
        httpx.Client(base_url=base, timeout=20) as client,
        client.stream("GET", task_path(task_id, "stream"), headers=headers) as response,
    ):
        event = ""
        for line in response.iter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                out.append((event, json.loads(line[6:])))


def test_watchers_at_different_cursors_each_get_their_resume() -> None:
    book = MemoryBook(retention_versions=3)
    feed = LocalChangeFeed()
    book.create(id="t", now_ms=NOW, ttl_ms=10_000_000, max_attempts=1)
    book.apply("t", StartEvent(at_ms=NOW + 1, worker="w"))
    with BackgroundServer(book, feed) as server:
        hub = server.app.state.hub
        near: list[Any] = []
        far: list[Any] = []
        threads = [
            threading.Thread(
                target=read_stream, args=(server.url, "t", {"Last-Event-ID": "1"}, near)
            ),
            threading.Thread(
                target=read_stream, args=(server.url, "t", {"Last-Event-ID": "0"}, far)
            ),
        ]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 10
        while hub.watcher_count < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        # The far watcher (at 0) was sent v1 on connect; now three changes land unheard,
        # then one is published: both are at 1, 4 behind > 3 retained -> a snapshot each.
        for p in (10, 20, 30):
            book.apply("t", ProgressEvent(at_ms=NOW + p, progress=p, cursor="c"))
        book.apply("t", SucceedEvent(at_ms=NOW + 99, result_ref="r", result_hash="h"))
        lookups = hub.lookups
        publish_all(book, feed, "t")
        for thread in threads:
            thread.join(15)
        assert hub.lookups - lookups == 1
    assert [kind for kind, _ in near] == ["task", "snapshot", "end"]
    assert [kind for kind, _ in far] == ["change", "task", "snapshot", "end"]
    assert far[2][1]["version"] == 5
    assert len(far[2][1]["history"]) == 5


def test_parse_change_rejects_malformed_payloads() -> None:
    good = {"taskId": "a", "version": 3, "state": "running", "progress": 40}
    change = parse_change(json.dumps(good))
    assert change is not None
    assert change.to_wire() == good
    for bad in (
        b"\xff",
        "[]",
        "{",
        json.dumps({**good, "version": "3"}),
        json.dumps({**good, "version": True}),
        json.dumps({**good, "taskId": 1}),
        json.dumps({**good, "progress": None}),
    ):
        assert parse_change(bad) is None


def test_metrics_of_an_in_memory_book() -> None:
    book = MemoryBook()
    now = time.time() * 1000
    book.create(id="m", now_ms=now, ttl_ms=3_600_000, max_attempts=1)
    book.apply("m", StartEvent(at_ms=now + 1, worker="w"), callback_id="c")
    book.apply("m", StartEvent(at_ms=now + 1, worker="w"), callback_id="c")
    with BackgroundServer(book) as server:
        text = httpx.get(server.url + "metrics", timeout=10).text
    assert 'asyncbook_transitions_total{reason="started"} 1.0' in text
    assert "asyncbook_duplicate_callbacks_total 1.0" in text
    assert "asyncbook_sweep_lateness_seconds 0.0" in text
    assert 'asyncbook_tasks{state="running"} 1.0' in text
    assert "asyncbook_stream_watchers 0.0" in text


def test_an_unreachable_book_is_503_not_500() -> None:
    port = free_port()  # closed again: nothing listens there
    client = redis.Redis(port=port, socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))
    with (
        BackgroundServer(RedisBook(client, namespace="down"), LocalChangeFeed()) as server,
        httpx.Client(base_url=server.url, timeout=20) as http,
    ):
        for path in ("api/tasks", task_path("x")[1:], task_path("x", "stream")[1:], "metrics"):
            response = http.get(path)
            assert response.status_code == 503, (path, response.text)
            assert response.json()["code"] == "unavailable"
    client.close()


def test_a_reader_too_slow_is_closed_without_end_to_resume(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(hub_module, "WATCHER_BACKLOG", 3)
    book = MemoryBook(retention_versions=100)
    book.create(id="s", now_ms=NOW, ttl_ms=10_000_000, max_attempts=1)
    book.apply("s", StartEvent(at_ms=NOW + 1, worker="w"))

    async def scenario() -> list[Any]:
        hub = Hub(book)
        watcher = hub.watch("s", 0)
        for p in range(1, 10):
            while hub._running:  # one lookup at a time, as changes would arrive
                await asyncio.sleep(0.001)
            book.apply("s", ProgressEvent(at_ms=NOW + 1 + p, progress=p, cursor="c"))
            hub.on_change(Change("s", p + 1, "running", p))
        while hub._running:
            await asyncio.sleep(0.001)
        left = []
        while not watcher.queue.empty():
            left.append(watcher.queue.get_nowait())
        assert hub.watcher_count == 0
        return left

    left = asyncio.run(scenario())
    assert left == [Batch(payload=b"", end=True)]
