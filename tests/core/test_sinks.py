"""Notification delivery: sinks, the webhook, at-least-once with acknowledgement."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from asyncbook import AsyncBook, AsyncBookError, MemoryBook, Notification
from asyncbook._delivery import DrainSource, deliver_notifications, notification_source
from asyncbook._sinks import SinkError, WebhookSink, idempotency_key, resolve_sink
from asyncbook.cli._demo import WebhookReceiver as Receiver


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.close()


def finished(book: AsyncBook, *ids: str) -> None:
    for task_id in ids:
        book.create(id=task_id, now_ms=0, ttl_ms=10, max_attempts=1)
        book.expire(task_id)


def test_webhook_posts_json_with_idempotency_key(receiver: Receiver) -> None:
    note = Notification(task_id="t-1", state="succeeded", at_ms=5)
    assert WebhookSink(receiver.url)(note) == 200
    ((headers, body),) = receiver.requests
    assert headers["Idempotency-Key"] == "t-1:succeeded" == idempotency_key(note)
    assert headers["Content-Type"] == "application/json"
    assert body == {"taskId": "t-1", "state": "succeeded", "atMs": 5}


def test_webhook_retries_server_errors_with_backoff(receiver: Receiver) -> None:
    receiver.statuses = [503, 500]
    note = Notification(task_id="t", state="failed", at_ms=1)
    assert WebhookSink(receiver.url, retries=2, backoff=0.01)(note) == 200
    assert len(receiver.requests) == 3
    assert len({r[0]["Idempotency-Key"] for r in receiver.requests}) == 1


def test_webhook_gives_up_after_bounded_retries(receiver: Receiver) -> None:
    receiver.statuses = [500, 500, 500]
    sink = WebhookSink(receiver.url, retries=2, backoff=0.01)
    with pytest.raises(SinkError, match="500"):
        sink(Notification(task_id="t", state="failed", at_ms=1))
    assert len(receiver.requests) == 3


def test_webhook_does_not_retry_a_client_error(receiver: Receiver) -> None:
    receiver.statuses = [400]
    with pytest.raises(SinkError, match="400"):
        WebhookSink(receiver.url, backoff=0.01)(Notification(task_id="t", state="failed", at_ms=1))
    assert len(receiver.requests) == 1


def test_webhook_unreachable_is_a_sink_error() -> None:
    sink = WebhookSink("http://127.0.0.1:9/hook", retries=1, backoff=0.01, timeout=1)
    with pytest.raises(SinkError, match="unreachable"):
        sink(Notification(task_id="t", state="failed", at_ms=1))


def test_resolve_sink() -> None:
    assert isinstance(resolve_sink("http://127.0.0.1:1/x"), WebhookSink)
    assert resolve_sink(print) is print
    assert resolve_sink("json:dumps") is json.dumps
    assert resolve_sink("json.dumps") is json.dumps
    with pytest.raises(AsyncBookError):
        resolve_sink(42)
    with pytest.raises(AsyncBookError):
        resolve_sink("no.such.module:thing")


def test_delivery_acks_what_every_sink_took(make_book: Any) -> None:
    book = make_book()
    finished(book, "a", "b")
    got: list[Notification] = []
    source = notification_source(book)
    report = deliver_notifications(source, [got.append], group="g", consumer="c")
    assert (report.delivered, report.failed) == (2, 0)
    assert sorted(n.task_id for n in got) == ["a", "b"]
    again = deliver_notifications(source, [got.append], group="g", consumer="c", min_idle_ms=0)
    assert again.delivered == 0
    assert len(got) == 2


def test_failed_sink_leaves_the_entry_for_redelivery(make_book: Any, receiver: Receiver) -> None:
    book = make_book()
    finished(book, "a")
    source = notification_source(book)
    receiver.statuses = [500]
    sink = WebhookSink(receiver.url, retries=0)
    first = deliver_notifications(source, [sink], group="g", consumer="c1", min_idle_ms=0)
    assert (first.delivered, first.failed) == (0, 1)
    second = deliver_notifications(source, [sink], group="g", consumer="c2", min_idle_ms=0)
    assert (second.delivered, second.failed) == (1, 0)
    keys = [headers["Idempotency-Key"] for headers, _ in receiver.requests]
    assert keys == ["a:expired", "a:expired"]


def test_drain_source_keeps_unacked_entries() -> None:
    book = MemoryBook()
    finished(book, "a")
    source = DrainSource(book)
    ((entry, note),) = source.consume_notifications("g", "c")
    assert isinstance(note, Notification)
    assert note.task_id == "a"
    assert source.consume_notifications("g", "c") == [(entry, note)]
    assert source.ack("g", entry) == 1
    assert source.consume_notifications("g", "c") == []


def test_webhook_keeps_one_connection_alive_between_notifications() -> None:
    """Three notifications, one TCP connection (HTTP/1.1 keep-alive through httpx)."""
    peers: list[tuple[str, int]] = []

    class KeepAlive(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            peers.append(self.client_address)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), KeepAlive)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    sink = WebhookSink(f"http://127.0.0.1:{server.server_address[1]}/hook")
    try:
        for state in ("succeeded", "failed", "expired"):
            assert sink(Notification(task_id=f"k-{state}", state=state, at_ms=1)) == 200
    finally:
        sink.close()
        server.shutdown()
        server.server_close()
        thread.join()
    assert len(peers) == 3
    assert len(set(peers)) == 1


def test_group_notifications_reach_the_sinks_once(receiver: Receiver) -> None:
    import fakeredis

    from asyncbook import GroupNotification, RedisBook
    from asyncbook._delivery import group_notification_source

    for book in (MemoryBook(), RedisBook(fakeredis.FakeRedis(), namespace="sinks-groups")):
        for n in range(2):
            book.create(id=f"m{n}", now_ms=0, ttl_ms=10, max_attempts=1, group_id="g")
            book.expire(f"m{n}")
        book.seal_group("g", 2)
        got: list[GroupNotification] = []
        source = group_notification_source(book)
        sinks: list[Callable[[GroupNotification], object]] = [
            got.append,
            WebhookSink(receiver.url, retries=0),
        ]
        assert deliver_notifications(source, sinks).delivered == 1
        assert deliver_notifications(source, sinks).delivered == 0
        (note,) = got
        assert isinstance(note, GroupNotification)
        assert note.counts["expired"] == 2
        headers, body = receiver.requests[-1]
        assert headers["Idempotency-Key"] == "group:g"
        assert body["groupId"] == "g"
