"""Hostile input against the status server: no 500s, and nothing stored changes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asyncbook import RedisBook, StartEvent, SucceedEvent, to_wire
from asyncbook.web._login import safe_next
from asyncbook.web._paths import task_path

from ..support.web_server import Running, get_raw, running_server

pytestmark = pytest.mark.redis

NOW = 1_000_000
SETTINGS = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

ids = st.text(max_size=40) | st.sampled_from(["", "/", "%", "%2F", "..", "q", "done", "a/stream"])
header_text = (
    st.text(
        st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"),
        max_size=40,
    )
    .map(lambda text: text.strip(" "))
    .map(lambda text: text.encode("latin-1"))
)
cursors = st.one_of(
    st.text(max_size=24),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
)
raw_segments = st.text(
    st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters="?#/"), max_size=30
)


@pytest.fixture(scope="module")
def server() -> Iterator[Running]:
    with running_server() as running:
        book = running.book
        book.create(id="q", now_ms=NOW, ttl_ms=10_000_000, max_attempts=1)
        book.create(id="done", now_ms=NOW, ttl_ms=10_000_000, max_attempts=1)
        book.apply("done", StartEvent(at_ms=NOW + 1, worker="w"))
        book.apply("done", SucceedEvent(at_ms=NOW + 2, result_ref="r", result_hash="h"))
        yield running


def stored(book: RedisBook) -> Any:
    """Everything a request could have changed: the tasks, the keys, the outbox."""
    tasks = [to_wire(task) for task in book.list_tasks(limit=1000).tasks]
    keys = sorted(book.client.scan_iter(match="{" + book.namespace + "}:*"))
    return tasks, keys, book.client.xlen(book.keys.outbox)


def check(response: httpx.Response) -> None:
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        body = response.json()
        assert set(body) >= {"code", "message"}


@SETTINGS
@given(task_id=ids, cursor=cursors, last_event_id=header_text)
def test_reads_never_fail_or_change_anything(
    server: Running, client: httpx.Client, task_id: str, cursor: str, last_event_id: bytes
) -> None:
    before = stored(server.book)
    check(client.get(task_path(task_id)) if task_id else client.get("/api/tasks/"))
    if task_id:
        check(client.get(task_path(task_id, "events"), params={"cursor": cursor}))
    check(client.get(task_path("done", "events"), params={"cursor": cursor}))
    # "done" is terminal: a stream on it ends by itself whatever the cursor.
    check(client.get(task_path("done", "stream"), headers={b"Last-Event-ID": last_event_id}))
    check(client.get(task_path("done", "stream"), params={"cursor": cursor}))
    check(client.get("/api/tasks", params={"state": task_id, "limit": cursor, "after": cursor}))
    assert stored(server.book) == before


@SETTINGS
@given(task_id=ids, key=header_text, auth=header_text)
def test_deliveries_that_cannot_deliver_change_nothing(
    server: Running, client: httpx.Client, task_id: str, key: bytes, auth: bytes
) -> None:
    before = stored(server.book)
    headers = {b"Idempotency-Key": key, b"Authorization": auth}
    check(client.post(task_path("q", "delivery"), headers=headers))
    if task_id and task_id != "done":
        check(client.post(task_path(task_id, "delivery"), headers=headers))
    assert stored(server.book) == before


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)
bodies = st.one_of(
    st.binary(max_size=64),
    json_values.map(lambda value: json.dumps(value).encode()),
    st.dictionaries(st.sampled_from(["reason", "x"]), json_values, max_size=2).map(
        lambda value: json.dumps(value).encode()
    ),
)
content_types = st.sampled_from(
    [None, b"application/json", b"text/plain", b"application/x-www-form-urlencoded", b"\xff"]
)


@SETTINGS
@given(task_id=ids, body=bodies, content_type=content_types, origin=header_text)
def test_cancels_that_cannot_cancel_change_nothing(
    server: Running,
    client: httpx.Client,
    task_id: str,
    body: bytes,
    content_type: bytes | None,
    origin: bytes,
) -> None:
    """Only "done" (terminal) and unknown ids: a cancel may answer, but never a 500."""
    before = stored(server.book)
    headers = {b"Origin": origin} | ({b"Content-Type": content_type} if content_type else {})
    check(client.post(task_path("done", "cancel"), content=body, headers=headers))
    if task_id and server.book.get(task_id) is None:
        check(client.post(task_path(task_id, "cancel"), content=body, headers=headers))
    assert stored(server.book) == before


@SETTINGS
@given(
    segment=raw_segments,
    suffix=st.sampled_from(["", "/events", "/stream", "/delivery", "/cancel", "/x"]),
)
def test_raw_paths_never_fail(
    server: Running, client: httpx.Client, segment: str, suffix: str
) -> None:
    before = stored(server.book)
    path = "/api/tasks/" + segment + suffix
    # A path that names the live task "q" (say "%71/stream") opens an SSE stream that
    # stays open; its status and headers are what this test is about.
    check(get_raw(client, server.url, path))
    assert stored(server.book) == before


@pytest.fixture(scope="module")
def guarded() -> Iterator[Running]:
    with running_server(token="s3cret-token-s3cret-token") as running:
        running.book.create(id="q", now_ms=NOW, ttl_ms=10_000_000, max_attempts=1)
        yield running


@pytest.mark.long
@SETTINGS
@given(auth=header_text, cookie=header_text, path=st.sampled_from(["/api/tasks", "/api/tasks/q"]))
def test_guessed_credentials_are_401_never_500(
    guarded: Running, auth: bytes, cookie: bytes, path: str
) -> None:
    with httpx.Client(base_url=guarded.url, timeout=10) as client:
        response = client.get(path, headers={b"Authorization": auth, b"Cookie": cookie})
    assert response.status_code == 401, response.text
    assert response.json()["code"] == "unauthorized"


@SETTINGS
@given(host=header_text)
def test_any_host_header_is_answered_or_refused_in_json(
    server: Running, client: httpx.Client, host: bytes
) -> None:
    response = client.get("/api/tasks/q", headers={b"Host": host})
    check(response)
    loopback = host.lower().split(b":")[0] in (b"localhost", b"127.0.0.1")
    assert response.status_code == (200 if loopback else 400), (host, response.text)


@SETTINGS
@given(next_page=st.text(max_size=40) | st.sampled_from(["//x", "/\\x", "/\t/x", "https:x"]))
def test_sign_in_never_sends_a_browser_to_another_site(next_page: str) -> None:
    # As a browser reads a Location: "\" as "/", tabs and newlines dropped.
    target = safe_next(next_page).replace("\\", "/")
    target = "".join(char for char in target if char not in "\t\n\r")
    assert urlsplit(urljoin("http://127.0.0.1:5566/login", target)).netloc == "127.0.0.1:5566"
    assert target.startswith("/")
