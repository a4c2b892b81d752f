"""``POST /api/tasks/<id>/cancel`` over HTTP, on RedisBook with real Redis."""

from __future__ import annotations

import json
import socket
import threading
import time
from importlib.resources import files
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from asyncbook import (
    CallbackResult,
    FailEvent,
    MemoryBook,
    ProgressEvent,
    RedisBook,
    StartEvent,
    SucceedEvent,
)
from asyncbook._models import STATE_NAMES
from asyncbook.errors import invalid
from asyncbook.web import BackgroundServer
from asyncbook.web._auth import COOKIE
from asyncbook.web._cancel import CANCEL_BODY_LIMIT, MAX_REASON
from asyncbook.web._pages import PAGES, read_page
from asyncbook.web._paths import task_path

from ..support.web_server import Running, assert_error, read_sse, running_server

pytestmark = pytest.mark.redis

TOKEN = "cancel-token-0123456789"
HOUR_MS = 3_600_000


def live(book: RedisBook, task_id: str, *, running: bool = False) -> None:
    """A task whose deadline is an hour away (by the book's clock, which cancel uses)."""
    now = book.now_ms()
    book.create(id=task_id, now_ms=now, ttl_ms=HOUR_MS, max_attempts=2)
    if running:
        book.apply(task_id, StartEvent(at_ms=now + 1, worker="w"))
        book.apply(task_id, ProgressEvent(at_ms=now + 2, progress=40, cursor="4"))


def cancel(client: httpx.Client, task_id: str, **options: Any) -> httpx.Response:
    return client.post(task_path(task_id, "cancel"), **options)


def state_of(book: RedisBook, task_id: str) -> str:
    task = book.get(task_id)
    assert task is not None
    return task.state.value


# -- answers ---------------------------------------------------------------------------------


def test_cancel_a_queued_task_answers_the_callback_result(
    server: Running, client: httpx.Client
) -> None:
    live(server.book, "q/1")
    response = cancel(client, "q/1")
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"task", "changed", "duplicate", "notify", "reason", "duplicateCallback"}
    assert body["reason"] == "cancelled"
    assert body["changed"] is True
    assert body["notify"] is True
    assert body["duplicate"] is False
    assert body["duplicateCallback"] is False
    assert body["task"]["state"] == "cancelled"
    assert body["task"]["error"] == "cancelled"  # no reason given
    assert body["task"]["history"][-1]["event"]["type"] == "cancel"
    assert state_of(server.book, "q/1") == "cancelled"
    notes = server.book.drain_notifications()
    assert [(note.task_id, note.state.value) for note in notes] == [("q/1", "cancelled")]


def test_cancel_a_running_task_with_a_reason_keeps_its_progress(
    server: Running, client: httpx.Client
) -> None:
    live(server.book, "r", running=True)
    response = cancel(client, "r", json={"reason": "user left ✓"})
    assert response.status_code == 200, response.text
    task = response.json()["task"]
    assert (task["state"], task["error"], task["progress"]) == ("cancelled", "user left ✓", 40)
    assert task["history"][-1]["event"]["reason"] == "user left ✓"


@pytest.mark.parametrize(
    ("content", "headers"),
    [
        (b"", {}),
        (b"", {"Content-Type": "application/x-www-form-urlencoded"}),  # curl -X POST -d ''
        (b"{}", {"Content-Type": "application/json"}),
        (b'{"reason": null}', {"Content-Type": "application/json; charset=utf-8"}),
        (b'{"reason": "   "}', {}),  # blank is "cancelled", as the spec says
        (b' \r\n{"reason": ""}\n', {"Content-Type": "application/merge-patch+json"}),
    ],
)
def test_cancel_without_a_reason_in_any_body_shape(
    server: Running, client: httpx.Client, content: bytes, headers: dict[str, str]
) -> None:
    live(server.book, "t")
    response = cancel(client, "t", content=content, headers=headers)
    assert response.status_code == 200, response.text
    assert response.json()["task"]["error"] == "cancelled"


def test_cancel_twice_is_a_duplicate_cancel_that_changes_nothing(
    server: Running, client: httpx.Client
) -> None:
    live(server.book, "t", running=True)
    first = cancel(client, "t", json={"reason": "first"})
    again = cancel(client, "t", json={"reason": "second"})
    assert again.status_code == 200
    body = again.json()
    assert body["reason"] == "duplicate-cancel"
    assert (body["changed"], body["duplicate"], body["notify"]) == (False, True, False)
    assert body["task"] == first.json()["task"]
    assert body["task"]["error"] == "first"
    assert len(server.book.drain_notifications()) == 1


@pytest.mark.parametrize("ended", ["succeeded", "failed"])
def test_cancel_a_task_that_ended_otherwise_is_409_with_its_state(
    server: Running, client: httpx.Client, ended: str
) -> None:
    book = server.book
    live(book, "t", running=True)
    now = book.now_ms()
    if ended == "succeeded":
        book.apply("t", SucceedEvent(at_ms=now, result_ref="r", result_hash="h"))
    else:
        book.apply("t", FailEvent(at_ms=now, error="boom", retryable=False))
    before = book.get("t")
    response = cancel(client, "t", json={"reason": "too late"})
    body = assert_error(response, 409, "terminal-conflict")
    assert body["state"] == ended
    assert ended in body["message"]
    assert "task" not in body
    assert book.get("t") == before


def test_cancel_at_the_deadline_expires_the_task_and_says_so(
    server: Running, client: httpx.Client
) -> None:
    server.book.create(id="late", now_ms=0, ttl_ms=1, max_attempts=1)  # overdue since 1970
    body = assert_error(cancel(client, "late"), 409, "expired")
    assert body["state"] == "expired"
    assert "deadline" in body["message"]
    assert state_of(server.book, "late") == "expired"
    again = assert_error(cancel(client, "late"), 409, "terminal-conflict")
    assert again["state"] == "expired"


def test_cancel_an_unknown_task_is_404(client: httpx.Client) -> None:
    body = assert_error(cancel(client, "nope", json={"reason": "x"}), 404, "invalid-request")
    assert body["field"] == "taskId"
    assert "nope" in body["message"]


@pytest.mark.parametrize(
    ("content", "field"),
    [
        (b'{"reason": 5}', "reason"),
        (b'{"reason": ["x"]}', "reason"),
        (b'{"reason": {"text": "x"}}', "reason"),
        (b'{"reason": true}', "reason"),
        (b'{"reason": "\\udcff"}', "reason"),  # a lone surrogate: no Unicode text
        (json.dumps({"reason": "x" * (MAX_REASON + 1)}).encode(), "reason"),
        (b'{"reasn": "typo"}', "body"),
        (b'{"reason": "x", "at": 1}', "body"),
        (b"null", "body"),
        (b'"just text"', "body"),
        (b"[]", "body"),
        (b"{", "body"),
        (b'{"reason": NaN}', "reason"),
        (b"\xff\xfe{}", "body"),
        (b"[" * 10_000, "body"),  # deeper than the parser recurses
    ],
)
def test_cancel_bad_input_is_400_naming_the_field_and_changes_nothing(
    server: Running, client: httpx.Client, content: bytes, field: str
) -> None:
    live(server.book, "t")
    headers = {"Content-Type": "application/json"}
    response = cancel(client, "t", content=content, headers=headers)
    body = assert_error(response, 400, "invalid-request")
    assert body["field"] == field
    assert state_of(server.book, "t") == "queued"


def test_the_longest_reason_is_accepted(server: Running, client: httpx.Client) -> None:
    live(server.book, "t")
    reason = "🛑" * MAX_REASON  # escaped by json.dumps: 12 bytes a character
    response = cancel(client, "t", json={"reason": reason})
    assert response.status_code == 200, response.text
    assert response.json()["task"]["error"] == reason


def test_a_body_not_sent_as_json_is_415(server: Running, client: httpx.Client) -> None:
    live(server.book, "t")
    form = cancel(client, "t", data={"reason": "x"})
    assert assert_error(form, 415, "unsupported-media-type")["field"] == "body"
    text = cancel(client, "t", content=b'{"reason": "x"}', headers={"Content-Type": "text/plain"})
    assert_error(text, 415, "unsupported-media-type")
    assert state_of(server.book, "t") == "queued"


def _complete(answer: bytes) -> bool:
    """True once ``answer`` holds a response head and its whole body: the length its
    Content-Length names, or a chunked body's last chunk."""
    head, found, body = answer.partition(b"\r\n\r\n")
    if not found:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        name, value = name.strip().lower(), value.strip().lower()
        if name == b"content-length":
            return len(body) >= int(value)
        if name == b"transfer-encoding" and value == b"chunked":
            return body == b"0\r\n\r\n" or body.endswith(b"\r\n0\r\n\r\n")
    return False


def _exchange(url: str, data: bytes) -> bytes:
    parts = urlsplit(url)
    assert parts.hostname is not None
    assert parts.port is not None
    answer = b""
    with socket.create_connection((parts.hostname, parts.port), timeout=5) as sock:
        try:
            sock.sendall(data)
            # Until the server closes, or its whole answer is in: a server that keeps the
            # connection open after refusing is as right as one that closes it.
            while not _complete(answer) and (chunk := sock.recv(65536)):
                answer += chunk
        except (ConnectionResetError, BrokenPipeError):
            pass
    return answer


def test_the_body_is_bounded_before_it_is_read(server: Running) -> None:
    live(server.book, "t")
    head = "POST /api/tasks/t/cancel HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    declared = head + "Content-Type: application/json\r\nContent-Length: 10485760\r\n\r\n"
    # Only the head and 1 KiB are sent: the answer must not wait for the other 10 MiB.
    answer = _exchange(server.url, declared.encode() + b'{"reason": "' + b"a" * 1024)
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
    assert b'"code":"too-large"' in answer
    body = b'{"reason": "' + b"a" * CANCEL_BODY_LIMIT + b'"}'
    chunked = head + "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    # No last chunk: a server that read to the end would never answer.
    answer = _exchange(server.url, chunked.encode() + f"{len(body):x}\r\n".encode() + body)
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
    assert state_of(server.book, "t") == "queued"


@pytest.mark.parametrize("method", ["GET", "HEAD", "PUT", "DELETE", "PATCH", "OPTIONS"])
def test_other_methods_are_405_allowing_post(
    server: Running, client: httpx.Client, method: str
) -> None:
    live(server.book, "t")
    response = client.request(method, task_path("t", "cancel"))
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    if method != "HEAD":
        assert response.json()["code"] == "method-not-allowed"
    assert state_of(server.book, "t") == "queued"


@pytest.mark.parametrize("task_id", ["a/cancel", "cancel", ".", "..", "with space/ü", "50%"])
def test_any_task_id_can_be_cancelled(server: Running, client: httpx.Client, task_id: str) -> None:
    live(server.book, task_id)
    live(server.book, "a")  # "a/cancel" (encoded) is a task of its own, not a's cancel
    response = cancel(client, task_id)
    assert response.status_code == 200, response.text
    assert response.json()["task"]["id"] == task_id
    assert state_of(server.book, "a") == "queued"
    # A browser drops "." and ".." segments: the page sends those ids in the query.
    live(server.book, task_id + "-q")
    query = client.post("/api/tasks//cancel", params={"id": task_id + "-q"})
    assert query.json()["task"]["id"] == task_id + "-q"


# -- who may cancel ----------------------------------------------------------------------------


CROSS_SITE = [
    {"Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "same-site"},
    {"Origin": "http://evil.example"},
    {"Origin": "null"},
    {"Origin": "http://[x"},  # not even a URL
]


@pytest.mark.parametrize("headers", CROSS_SITE)
def test_without_a_token_a_cross_site_cancel_is_refused(
    server: Running, client: httpx.Client, headers: dict[str, str]
) -> None:
    """With no token anyone on loopback may cancel, but no page on another site may."""
    live(server.book, "t")
    response = cancel(client, "t", headers=headers)
    assert_error(response, 403, "cross-site")
    assert state_of(server.book, "t") == "queued"
    same = {"Sec-Fetch-Site": "same-origin", "Origin": server.url}
    assert cancel(client, "t", headers=same).status_code == 200


def test_with_a_token_only_the_bearer_token_cancels() -> None:
    with (
        running_server(token=TOKEN) as server,
        httpx.Client(base_url=server.url, timeout=10) as client,
    ):
        live(server.book, "t")
        refused = cancel(client, "t")
        assert_error(refused, 401, "unauthorized")
        assert refused.headers["www-authenticate"].startswith("Bearer")
        wrong = cancel(client, "t", headers={"Authorization": "Bearer " + TOKEN[:-1]})
        assert_error(wrong, 401, "unauthorized")
        # Signed in: the cookie opens the page, but never authorizes a change.
        assert client.post("/login", data={"token": TOKEN}).status_code == 303
        assert COOKIE in client.cookies
        assert client.get(task_path("t")).status_code == 200
        same = {"Sec-Fetch-Site": "same-origin", "Origin": server.url}
        assert_error(cancel(client, "t", headers=same), 401, "unauthorized")
        for headers in CROSS_SITE:
            assert_error(cancel(client, "t", headers=headers), 401, "unauthorized")
        assert state_of(server.book, "t") == "queued"
        bearer = {"Authorization": "Bearer " + TOKEN}
        # A page on another site cannot send the header; were it sent, it is refused too.
        crossed = cancel(client, "t", headers=bearer | {"Sec-Fetch-Site": "cross-site"})
        assert_error(crossed, 403, "cross-site")
        done = cancel(client, "t", headers=bearer | same, json={"reason": "ops"})
        assert done.status_code == 200
        assert done.json()["task"]["error"] == "ops"
        assert state_of(server.book, "t") == "cancelled"


def test_a_body_is_not_read_before_the_token_is_checked() -> None:
    with running_server(token=TOKEN) as server:
        live(server.book, "t")
        head = (
            "POST /api/tasks/t/cancel HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Content-Type: application/json\r\nContent-Length: 10485760\r\n\r\n"
        )
        answer = _exchange(server.url, head.encode() + b"{")
        assert answer.startswith(b"HTTP/1.1 401 "), answer[:200]


# -- what follows a cancel -------------------------------------------------------------------------


def test_the_tasks_stream_shows_the_cancel_and_ends(server: Running, client: httpx.Client) -> None:
    live(server.book, "s", running=True)
    hub = server.app.state.hub
    answers: list[httpx.Response] = []

    def cancel_once_watched() -> None:
        deadline = time.monotonic() + 10
        while hub.watcher_count == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        with httpx.Client(base_url=server.url, timeout=10) as other:
            answers.append(cancel(other, "s", json={"reason": "stop"}))

    canceller = threading.Thread(target=cancel_once_watched)
    canceller.start()
    with client.stream("GET", task_path("s", "stream"), params={"cursor": "2"}) as response:
        events = read_sse(response)
    canceller.join()
    assert answers[0].status_code == 200
    change = next(e for e in events if e["event"] == "change")
    assert change["data"]["event"]["type"] == "cancel"
    assert change["data"]["event"]["reason"] == "stop"
    assert events[-1] == {"event": "end", "data": {"state": "cancelled", "version": 3}}


def test_metrics_and_listing_count_cancelled_tasks(server: Running, client: httpx.Client) -> None:
    live(server.book, "a")
    live(server.book, "b", running=True)
    cancel(client, "a")
    cancel(client, "a")
    text = client.get("/metrics").text
    assert 'asyncbook_tasks{state="cancelled"} 1.0' in text
    assert 'asyncbook_transitions_total{reason="cancelled"} 1.0' in text
    assert 'asyncbook_transitions_total{reason="duplicate-cancel"} 1.0' in text
    listing = client.get("/api/tasks", params={"state": "cancelled"}).json()
    assert [task["id"] for task in listing["tasks"]] == ["a"]


# -- the schema and the page ---------------------------------------------------------------------


def test_openapi_documents_cancel(client: httpx.Client) -> None:
    schema = client.get("/openapi.json").json()
    operation = schema["paths"]["/api/tasks/{id}/cancel"]["post"]
    assert set(operation) >= {"summary", "parameters", "requestBody", "responses"}
    assert operation["parameters"][0]["name"] == "id"
    assert {"200", "400", "401", "403", "404", "405", "409", "413", "415"} <= set(
        operation["responses"]
    )
    body = operation["requestBody"]
    assert body["required"] is False
    ref = body["content"]["application/json"]["schema"]["$ref"]
    request = schema["components"]["schemas"][ref.rsplit("/", 1)[1]]
    assert request["additionalProperties"] is False
    assert request["properties"]["reason"]["maxLength"] == MAX_REASON
    ok = operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    assert ok.endswith("/CallbackResult")
    assert "CallbackResult" in schema["components"]["schemas"]
    conflict = operation["responses"]["409"]["content"]["application/json"]["schema"]["$ref"]
    refusal = schema["components"]["schemas"][conflict.rsplit("/", 1)[1]]
    assert "state" in refusal["required"]
    assert set(refusal["properties"]["code"]["enum"]) == {"terminal-conflict", "expired"}


def test_every_state_has_a_filter_option_and_a_colour() -> None:
    index = read_page("index.html")
    css = (files("asyncbook.web") / "static" / "app.css").read_text(encoding="utf-8")
    assert "cancelled" in STATE_NAMES
    for state in STATE_NAMES:
        assert f"<option>{state}</option>" in index, state
        assert f".state.{state} {{" in css, state


@pytest.mark.parametrize("name", sorted(PAGES))
def test_every_change_dialog_has_its_fields_and_no_marker_is_left(name: str) -> None:
    """A dialog's reason, token field and error come from one fragment, under the ids
    ``common.js`` finds by the dialog's prefix."""
    page = read_page(name)
    assert "{{change-fields" not in page
    for prefix in ("cancel", "retry", "bulk"):
        if f'id="{prefix}-dialog"' in page:
            for part in ("reason", "token-field", "token", "error", "confirm"):
                assert f'id="{prefix}-{part}"' in page, (name, prefix, part)


def test_the_task_page_asks_for_the_token_only_when_the_server_has_one(
    client: httpx.Client,
) -> None:
    open_page = client.get("/task", params={"id": "t"}).text
    assert '<button type="button" id="cancel-open"' in open_page
    assert '<p id="cancel-token-field" hidden>' in open_page
    assert 'role="status" aria-live="polite"' in open_page
    with (
        running_server(token=TOKEN) as guarded,
        httpx.Client(base_url=guarded.url, timeout=10) as other,
    ):
        other.post("/login", data={"token": TOKEN})
        page = other.get("/task", params={"id": "t"}).text
        assert '<p id="cancel-token-field">' in page
        assert TOKEN not in page


class StricterBook(MemoryBook):
    """A book that refuses every reason, as a stricter book might: in its own words."""

    def cancel(
        self,
        task_id: str,
        reason: str | None = None,
        *,
        at_ms: int | float | None = None,
        callback_id: str | None = None,
        actor: str | None = None,
    ) -> CallbackResult:
        if reason is not None:
            raise invalid("event.reason is refused here", field="event.reason")
        return super().cancel(task_id, reason, at_ms=at_ms, callback_id=callback_id, actor=actor)


def test_a_reason_the_book_refuses_is_400_naming_reason() -> None:
    book = StricterBook()
    book.create(id="t", now_ms=0, ttl_ms=10**15, max_attempts=1)
    with BackgroundServer(book) as server, httpx.Client(base_url=server.url, timeout=10) as client:
        body = assert_error(cancel(client, "t", json={"reason": "x"}), 400, "invalid-request")
        assert body["field"] == "reason"
        assert body["message"] == "async-task: event.reason is refused here"
        assert cancel(client, "t").json()["reason"] == "cancelled"
