"""Notification delivery: sinks, the webhook, at-least-once with acknowledgement."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import closing
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

import pytest

from asyncbook import AsyncBook, AsyncBookError, AsyncState, MemoryBook, Notification, to_wire
from asyncbook._delivery import DrainSource, deliver_notifications, notification_source
from asyncbook._sinks import (
    PermanentSinkError,
    SinkError,
    WebhookSink,
    idempotency_key,
    resolve_sink,
    shown_webhook_url,
)
from asyncbook._webhook_signing import webhook_id
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


ODD_IDS = ("ünï/42", "tab\there", "new\nline", "cr\rlf", "100%", "del\x7f", " spaced ", "😀")


def test_every_id_a_book_accepts_is_delivered(make_book: Any, receiver: Receiver) -> None:
    """Non-ASCII and control characters go percent-encoded into ``Idempotency-Key``:
    once delivered, nothing is left for redelivery."""
    book = make_book()
    finished(book, *ODD_IDS)
    source = notification_source(book)
    with closing(WebhookSink(receiver.url, retries=0)) as sink:
        report = deliver_notifications(source, [sink], group="g", consumer="c", min_idle_ms=0)
    assert (report.delivered, report.failed) == (len(ODD_IDS), 0)
    keys = [headers["Idempotency-Key"] for headers, _ in receiver.requests]
    assert sorted(unquote(key).rsplit(":", 1)[0] for key in keys) == sorted(ODD_IDS)
    assert all(key.isascii() and key.isprintable() and " " not in key for key in keys)
    assert "ünï%2F42:expired" not in keys
    assert "%C3%BCn%C3%AF/42:expired" in keys
    assert "100%25:expired" in keys


def test_a_request_that_cannot_be_made_is_given_up_loudly(
    make_book: Any, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    """A header no request can carry never succeeds: one error, the entry acknowledged,
    not retried every minute for ever."""
    book = make_book()
    finished(book, "a")
    source = notification_source(book)
    sink = WebhookSink(receiver.url, retries=3, backoff=0.01, headers={"X-Tag": "a\nb"})
    with pytest.raises(PermanentSinkError, match="request refused"):
        sink(Notification(task_id="a", state="expired", at_ms=1))
    with caplog.at_level(logging.ERROR, logger="asyncbook.sinks"):
        first = deliver_notifications(source, [sink], group="g", consumer="c", min_idle_ms=0)
    assert (first.delivered, first.failed, first.dropped) == (0, 0, 1)
    assert "given up" in caplog.text
    assert "expired of task a" in caplog.text
    again = deliver_notifications(source, [sink], group="g", consumer="c", min_idle_ms=0)
    assert (again.delivered, again.failed, again.dropped) == (0, 0, 0)
    assert receiver.requests == []


SECRET_URL_PARTS = ("alice", "pa55word", "s3cr3t", "k3y")


def _shows_no_credential(text: str) -> bool:
    return not any(part in text for part in SECRET_URL_PARTS)


def test_shown_webhook_url_hides_user_info_and_query_values() -> None:
    url = "https://alice:pa55word@hooks.example.com:8443/in/path?token=s3cr3t&key=k3y"
    shown = shown_webhook_url(url)
    assert shown == "https://***@hooks.example.com:8443/in/path?token=***&key=***"
    assert shown_webhook_url("http://host/p") == "http://host/p"
    assert shown_webhook_url("http://host/p#s3cr3t") == "http://host/p#***"


def test_no_log_line_or_error_shows_the_urls_credentials(
    receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    note = Notification(task_id="t", state="failed", at_ms=1)
    unreachable = WebhookSink(
        "http://alice:pa55word@127.0.0.1:9/hook?token=s3cr3t&key=k3y", retries=1, backoff=0.01
    )
    base = receiver.url.replace("http://", "http://alice:pa55word@")
    refused = WebhookSink(f"{base}?token=s3cr3t", retries=1, backoff=0.01)
    receiver.statuses = [503, 503, 404]
    errors: list[str] = []
    with caplog.at_level(logging.WARNING, logger="asyncbook.sinks"):
        for sink in (unreachable, refused, refused):
            with pytest.raises(SinkError) as caught:
                sink(note)
            errors.append(str(caught.value))
    assert "unreachable" in errors[0]
    assert "503" in errors[1]
    assert "404" in errors[2]
    assert caplog.records
    assert all(_shows_no_credential(r.getMessage()) for r in caplog.records)
    assert all(_shows_no_credential(error) for error in errors)
    assert _shows_no_credential(repr(unreachable))
    assert "***@127.0.0.1:9" in repr(unreachable)


def test_a_notification_carries_the_version_that_ended_it(make_book: Any) -> None:
    book = make_book()
    finished(book, "a")
    task = book.get("a")
    assert task is not None
    version = task.version
    ((_, note),) = notification_source(book).consume_notifications("g", "c")
    assert isinstance(note, Notification)
    assert note.version == version
    assert "version" not in to_wire(note)  # the reference's shape, unchanged


def test_each_notification_has_its_own_webhook_id() -> None:
    """The same for each delivery; another for another namespace, version or time (a
    task id used again after retention)."""
    note = Notification(task_id="t", state="succeeded", at_ms=5, version=3)
    same = Notification(task_id="t", state="succeeded", at_ms=5, version=3)
    assert webhook_id(note) == webhook_id(same) == webhook_id(note, "asyncbook")
    others = {
        webhook_id(note, "other"),
        webhook_id(note.model_copy(update={"at_ms": 6})),
        webhook_id(note.model_copy(update={"version": 4})),
        webhook_id(note.model_copy(update={"state": AsyncState.FAILED})),
        webhook_id(note.model_copy(update={"task_id": "u"})),
        webhook_id(note),
    }
    assert len(others) == 6
