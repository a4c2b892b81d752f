"""A task's output over HTTP: the JSON page, and the SSE stream resumed with
``Last-Event-ID`` through random disconnects (a property test) and across a retry."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asyncbook import FailEvent, MemoryBook, RedisBook, StartEvent, SucceedEvent
from asyncbook.web import create_app
from asyncbook.web._paths import task_path

from ..support.asgi import serving
from ..support.web_server import Running, assert_error, output_events, running_server

NOW = 1_000_000


def running(book: RedisBook, task_id: str) -> None:
    book.create(id=task_id, now_ms=NOW, ttl_ms=10**9, max_attempts=3)
    book.apply(task_id, StartEvent(at_ms=NOW + 1, worker="w"))


def test_the_page_and_its_errors(server: Running, client: httpx.Client) -> None:
    running(server.book, "p/1")
    server.book.append_output("p/1", "a", "b", "c")
    body = client.get(task_path("p/1", "output"), params={"cursor": 1, "limit": 1}).json()
    assert [c["chunk"] for c in body["chunks"]] == ["b"]
    assert (body["cursor"], body["done"], body["attempt"], body["state"]) == (
        2,
        False,
        1,
        "running",
    )
    assert body["chunks"][0].keys() == {"seq", "attempt", "atMs", "chunk"}
    assert_error(client.get(task_path("nope", "output")), 404, "invalid-request")
    for params in [{"cursor": "-1"}, {"cursor": "x"}, {"limit": "0"}, {"limit": "1001"}]:
        assert_error(client.get(task_path("p/1", "output"), params=params), 400, "invalid-request")
    bad = client.get(task_path("p/1", "output-stream"), headers={"Last-Event-ID": "x"})
    assert_error(bad, 400, "invalid-request")
    assert_error(client.get(task_path("nope", "output-stream")), 404, "invalid-request")


def _writer(book: RedisBook, task_id: str, chunks: int) -> None:
    for n in range(chunks):
        if n == chunks // 2:  # a retry halfway: the second attempt writes the rest
            book.apply(task_id, FailEvent(at_ms=NOW + 2, error="x", retryable=True))
            book.apply(task_id, StartEvent(at_ms=NOW + 3, worker="w"))
        book.append_output(task_id, f"t{n} ")
        time.sleep(0.001)
    book.apply(task_id, SucceedEvent(at_ms=NOW + 4, result_ref="r", result_hash="h"))


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(takes=st.lists(st.integers(1, 12), min_size=1, max_size=30))
def test_random_disconnects_lose_and_repeat_nothing(takes: list[int]) -> None:
    """A client that hangs up after a random number of events and reconnects with the
    last id it saw gets the whole output, each chunk once, in order."""
    chunks = 60
    with running_server() as server, httpx.Client(base_url=server.url, timeout=10) as client:
        running(server.book, "live")
        writer = threading.Thread(target=_writer, args=(server.book, "live", chunks))
        writer.start()
        got: list[dict[str, Any]] = []
        cursor, turn = 0, 0
        while not got or got[-1]["event"] != "end":
            take = takes[turn % len(takes)]
            turn += 1
            events = output_events(client, "live", cursor, take)
            got += events
            cursor = events[-1]["id"] if events else cursor
        writer.join()
    outputs = [event for event in got if event["event"] == "output"]
    assert [e["data"]["chunk"] for e in outputs] == [f"t{n} " for n in range(chunks)]
    assert [e["id"] for e in outputs] == list(range(1, chunks + 1))
    assert [e["data"]["attempt"] for e in outputs] == [1] * (chunks // 2) + [2] * (chunks // 2)
    assert got[-1]["data"] == {"taskId": "live", "state": "succeeded", "cursor": chunks}


def test_a_book_with_no_twin_streams_its_output_too() -> None:
    """Over a MemoryBook the server's streams read in place, pausing between reads."""
    book = MemoryBook()
    book.create(id="m", now_ms=NOW, ttl_ms=10**9, max_attempts=1)
    book.apply("m", StartEvent(at_ms=NOW + 1, worker="w"))
    book.append_output("m", "a")

    def finish() -> None:
        book.append_output("m", "b")
        book.apply("m", SucceedEvent(at_ms=NOW + 2, result_ref="r", result_hash="h"))

    with serving(create_app(book)) as url, httpx.Client(base_url=url, timeout=10) as client:
        threading.Timer(0.2, finish).start()
        events = output_events(client, "m", 0, 100)
    assert [(e["event"], e["id"]) for e in events] == [("output", 1), ("output", 2), ("end", 2)]
