"""The status server on a sharded namespace (four shards on the test Redis): the API's
reads merge the shards, the streams follow every shard's channel, /metrics sums the
gauges, and retries are decided in each task's shard."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from asyncbook import PublishInfo, RedisBook, StartEvent
from asyncbook.redis import ShardedRedisBook
from asyncbook.web._paths import task_path

from ..support.retries import ended_task, kept_message, sent
from ..support.web_server import WEB_REDIS_URL, Running, read_sse, running_server
from .test_api import NOW, run_task

pytestmark = pytest.mark.redis

IDS = [f"s{i}" for i in range(12)]


@pytest.fixture
def server() -> Iterator[Running]:
    with running_server(shards=4, broker_url=WEB_REDIS_URL) as running:
        yield running


def sharded(book: RedisBook) -> ShardedRedisBook:
    assert isinstance(book, ShardedRedisBook)
    return book


def test_the_ids_fall_in_every_shard(server: Running) -> None:
    book = sharded(server.book)
    assert {book.map.index_of(task_id) for task_id in IDS} == {0, 1, 2, 3}


def test_the_api_reads_every_shard(server: Running, client: httpx.Client) -> None:
    book = server.book
    now = book.now_ms()  # workers are listed when seen within the last day
    for n, task_id in enumerate(IDS):
        info = PublishInfo(name="app.even" if n % 2 == 0 else "app.odd", queue="q")
        book.create(id=task_id, now_ms=now + n, ttl_ms=10_000_000, max_attempts=1, info=info)
    for task_id in IDS[:4]:
        book.apply(task_id, StartEvent(at_ms=now + 100, worker="w1"))
    for task_id in IDS[8:10]:
        book.cancel(task_id, "no longer wanted", at_ms=now + 200)
    seen: list[str] = []
    after: str | None = None
    while True:
        params = {"limit": "5"} | ({"after": after} if after else {})
        page = client.get("/api/search", params=params).json()
        seen += [row["task"]["id"] for row in page["tasks"]]
        after = page.get("nextAfter")
        if after is None:
            break
    assert seen == IDS[::-1]
    assert (page["totals"]["queued"], page["totals"]["running"]) == (6, 4)
    assert page["totals"]["cancelled"] == 2
    odd = client.get("/api/search", params={"name": "app.odd", "sort": "oldest"}).json()
    assert [row["task"]["id"] for row in odd["tasks"]] == IDS[1::2]
    listing = client.get("/api/tasks", params={"state": "running"}).json()
    assert {task["id"] for task in listing["tasks"]} == set(IDS[:4])
    assert client.get(task_path("s7")).json()["id"] == "s7"
    assert client.get("/api/names").json()["names"] == ["app.even", "app.odd"]
    [worker] = client.get("/api/workers").json()["workers"]
    assert (worker["name"], worker["started"]) == ("w1", 4)
    metrics = client.get("/metrics").text
    families = {family.name: family for family in text_string_to_metric_families(metrics)}
    tasks = families["asyncbook_tasks"].samples
    assert {s.labels["state"]: s.value for s in tasks}["queued"] == 6
    outbox = families["asyncbook_outbox_entries"].samples
    assert {s.labels["stream"]: s.value for s in outbox}["tasks"] == len(book.drain_notifications())


def test_streams_follow_every_shard(server: Running, client: httpx.Client) -> None:
    for task_id in IDS[:4]:
        server.book.create(id=task_id, now_ms=NOW, ttl_ms=10_000_000, max_attempts=2)
    hub = server.app.state.hub

    def work() -> None:
        while hub.watcher_count == 0:
            threading.Event().wait(0.01)
        threading.Event().wait(0.1)
        for task_id in IDS[:4]:
            run_task(server.book, task_id, steps=2)

    worker = threading.Thread(target=work)
    worker.start()
    last = IDS[3]
    with client.stream("GET", task_path(last, "stream")) as response:
        events = read_sse(response)
    worker.join()
    assert [e["id"] for e in events if e["event"] == "change"] == [1, 2, 3, 4]
    assert events[-1]["data"] == {"state": "succeeded", "version": 4}

    changes: list[dict[str, Any]] = []
    with (
        httpx.Client(base_url=server.url, timeout=10) as http,
        http.stream("GET", "/api/changes") as response,
    ):

        def run_four() -> None:
            for task_id in IDS[4:8]:
                run_task(server.book, task_id, 1)

        threading.Timer(0.3, run_four).start()
        for line in response.iter_lines():
            if line.startswith("data: "):
                changes.append(json.loads(line[6:]))
                if sum(change["state"] == "succeeded" for change in changes) == 4:
                    break
    assert {change["taskId"] for change in changes} == set(IDS[4:8])


def test_retries_are_decided_in_each_task_s_shard(
    server: Running, client: httpx.Client, queue: str
) -> None:
    book = sharded(server.book)
    for task_id in IDS[:6]:
        ended_task(book, task_id, message=kept_message(name="app.bulk", queue=queue))
    one = client.post(task_path(IDS[0], "resend"), json={"reason": "upstream back"}).json()
    assert one["code"] is None
    bulk = client.post("/api/resend?limit=100", json={"reason": "deploy"}).json()
    assert (bulk["retried"], bulk["refused"]) == (5, 1)
    [refused] = [result for result in bulk["results"] if result["code"] is not None]
    assert (refused["taskId"], refused["code"]) == (IDS[0], "already-retried")
    assert len(sent(queue)) == 6
    for result in [one, *bulk["results"]]:
        original, new_id = result["taskId"], result["retriedAs"]
        assert book.map.index_of(new_id) == book.map.index_of(original)
        info = book.info(new_id)
        assert info is not None
        assert info.retry_of == original
        assert next(e.outcome for e in book.audit(original) if e.action == "resend") in (
            "retried",
            "already-retried",
        )
    assert book.count_by_state()["queued"] == 6


@pytest.mark.parametrize("shards", [1, 2])
def test_a_server_of_another_count_refuses_to_read(shards: int) -> None:
    """A server whose book has another count than the namespace's four answered "no
    task" and /metrics of zeros: its reads are refused, naming the stored count."""
    with running_server(shards=shards) as running:
        four = RedisBook(running.book.client, namespace=running.book.namespace, shards=4)
        for task_id in IDS:
            four.create(id=task_id, now_ms=NOW, ttl_ms=10_000_000, max_attempts=1)
        with httpx.Client(base_url=running.url) as http:
            answers = [http.get(path) for path in (f"/api/tasks/{IDS[1]}", "/api/search")]
            metrics = http.get("/metrics")
    for answer in answers:
        assert answer.status_code == 409, answer.text
        assert answer.json()["field"] == "shards"
        assert "has 4 shards; open it with shards=4" in answer.json()["message"]
    assert metrics.status_code != 200, metrics.text
