"""The status server's JSON API and streams, over HTTP, on RedisBook with real Redis."""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

import fakeredis
import httpx
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from asyncbook import AsyncBookError, ProgressEvent, RedisBook, StartEvent, SucceedEvent
from asyncbook._limits import TASK_ID_LIMIT
from asyncbook._models import STATE_NAMES
from asyncbook.web import BackgroundServer, BookChangeFeed, feed_for
from asyncbook.web._auth import COOKIE, check_bind, is_loopback, token_matches
from asyncbook.web._paths import split_task_path, task_path

from ..support.books import delete_namespace
from ..support.web_server import WEB_REDIS_URL, Running, assert_error, read_sse, running_server

pytestmark = pytest.mark.redis

NOW = 1_000_000
TOKEN = "s3cret-s3cret-s3cret"
HOSTILE_IDS = ["a/b", "50%", "with space", "ünï/cödé ✓", "x/events", "events", "%2F", "{tag}:1"]


def url(task_id: str, suffix: str | None = None) -> str:
    return task_path(task_id, suffix)


def run_task(book: RedisBook, task_id: str, steps: int = 10, pause: float = 0.0) -> None:
    """Create a task and drive it to success: start, ``steps`` progress events, succeed."""
    book.create(id=task_id, now_ms=NOW, ttl_ms=10_000_000, max_attempts=2, exist_ok=True)
    book.apply(task_id, StartEvent(at_ms=NOW + 1, worker="w"))
    for i in range(1, steps + 1):
        time.sleep(pause)
        progress = i * 100 // steps
        book.apply(task_id, ProgressEvent(at_ms=NOW + 1 + i, progress=progress, cursor=str(i)))
    book.apply(task_id, SucceedEvent(at_ms=NOW + 500, result_ref=f"ref:{task_id}", result_hash="h"))


# -- listing ---------------------------------------------------------------------------


def test_listing_pages_newest_first_with_state_filter(
    server: Running, client: httpx.Client
) -> None:
    for i in range(5):
        server.book.create(id=f"t{i}", now_ms=NOW, ttl_ms=60_000, max_attempts=1)
    server.book.apply("t3", StartEvent(at_ms=NOW + 1, worker="w"))
    seen: list[str] = []
    after: str | None = None
    while True:
        params = {"limit": "2"} | ({"after": after} if after else {})
        page = client.get("/api/tasks", params=params).json()
        seen += [task["id"] for task in page["tasks"]]
        assert all("history" not in task for task in page["tasks"])
        after = page.get("nextAfter")
        if after is None:
            break
    assert seen == ["t4", "t3", "t2", "t1", "t0"]
    running = client.get("/api/tasks", params={"state": "running"}).json()
    assert [task["id"] for task in running["tasks"]] == ["t3"]
    assert client.get("/api/tasks", params={"state": ""}).json()["tasks"][0]["id"] == "t4"


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"state": "done"}, "state"),
        ({"limit": "0"}, "limit"),
        ({"limit": "1001"}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"limit": "-1"}, "limit"),
        ({"after": "not-a-cursor"}, "after"),
    ],
)
def test_listing_rejects_bad_parameters(
    client: httpx.Client, params: dict[str, str], field: str
) -> None:
    body = assert_error(client.get("/api/tasks", params=params), 400, "invalid-request")
    assert body["field"] == field


# -- one task ----------------------------------------------------------------------------


@pytest.mark.parametrize("task_id", HOSTILE_IDS)
def test_task_ids_of_any_shape_work_url_encoded(
    server: Running, client: httpx.Client, task_id: str
) -> None:
    server.book.create(id=task_id, now_ms=NOW, ttl_ms=60_000, max_attempts=1)
    task = client.get(url(task_id))
    assert task.status_code == 200
    assert task.json()["id"] == task_id
    assert task.json()["history"] == []
    events = client.get(url(task_id, "events"), params={"cursor": "0"}).json()
    assert events["mode"] == "caught-up"
    assert events["task"]["id"] == task_id


def test_an_id_ending_in_a_suffix_is_not_confused_with_the_suffix(
    server: Running, client: httpx.Client
) -> None:
    server.book.create(id="x", now_ms=NOW, ttl_ms=60_000, max_attempts=1)
    server.book.create(id="x/events", now_ms=NOW, ttl_ms=60_000, max_attempts=2)
    assert client.get(url("x/events")).json()["maxAttempts"] == 2
    assert client.get("/api/tasks/x/events").json()["mode"] == "caught-up"
    assert client.get("/api/tasks/x%2Fevents/events").json()["task"]["id"] == "x/events"


def test_task_is_the_spec_json(server: Running, client: httpx.Client) -> None:
    run_task(server.book, "r", steps=2)
    task = client.get(url("r")).json()
    assert task["state"] == "succeeded"
    assert task["resultRef"] == "ref:r"
    assert [entry["version"] for entry in task["history"]] == [1, 2, 3, 4]
    assert task["history"][0]["event"] == {"type": "start", "atMs": NOW + 1, "worker": "w"}
    assert "error" not in task


def test_unknown_task_is_404_everywhere(client: httpx.Client) -> None:
    for path in (url("nope"), url("nope", "events"), url("nope", "stream")):
        body = assert_error(client.get(path), 404, "invalid-request")
        assert "nope" in body["message"]
    response = client.post(url("nope", "delivery"), headers={"Idempotency-Key": "k"})
    assert_error(response, 404, "invalid-request")
    assert_error(client.post(url("nope", "cancel")), 404, "invalid-request")


def test_an_id_over_the_limit_is_a_400_naming_task_id(client: httpx.Client) -> None:
    long_id = "x" * (TASK_ID_LIMIT + 1)
    for path in (url(long_id), url(long_id, "events"), url(long_id, "audit")):
        body = assert_error(client.get(path), 400, "invalid-request")
        assert body["field"] == "taskId"
    assert_error(client.post(url(long_id, "cancel")), 400, "invalid-request")
    assert client.get(url("x" * TASK_ID_LIMIT)).status_code == 404  # no such task, that is all


def test_bad_paths_and_methods(client: httpx.Client) -> None:
    assert_error(client.get("/api/tasks/%FF%FE"), 400, "invalid-request")
    assert_error(client.get("/no/such/page"), 404, "not-found")
    assert_error(client.post(url("a")), 405, "method-not-allowed")
    assert client.post(url("a", "events")).headers["allow"] == "GET"
    assert_error(client.get(url("a", "delivery")), 405, "method-not-allowed")
    assert_error(client.delete("/api/tasks"), 405, "method-not-allowed")


@pytest.mark.parametrize(
    ("raw", "task_id"),
    [
        (b"/api/ta%73ks/ID", "ID"),
        (b"/%61pi/tasks/ID", "ID"),
        (b"/api/%74asks/s%2FID", "s/ID"),
    ],
)
def test_an_encoded_prefix_reaches_the_same_task_and_no_other(
    server: Running, client: httpx.Client, raw: bytes, task_id: str
) -> None:
    """The router matches the decoded path: the id is read from the same split of it."""
    server.book.create(id="ID", now_ms=NOW, ttl_ms=60_000, max_attempts=1)
    server.book.create(id="s/ID", now_ms=NOW, ttl_ms=60_000, max_attempts=2)
    base = httpx.URL(server.url)
    assert client.get(base.copy_with(raw_path=raw)).json()["id"] == task_id
    events = client.get(base.copy_with(raw_path=raw + b"/events?cursor=0")).json()
    assert events["task"]["id"] == task_id


@pytest.mark.parametrize("raw", [b"/api/tasks%2FID", b"/api%2Ftasks/ID", b"/api/tasks%2Fs/ID"])
def test_an_encoded_slash_in_the_prefix_names_no_task(
    server: Running, client: httpx.Client, raw: bytes
) -> None:
    for task_id in ("ID", "s/ID", "2FID", "FID", "s%2FID"):
        server.book.create(id=task_id, now_ms=NOW, ttl_ms=60_000, max_attempts=1)
    response = client.get(httpx.URL(server.url).copy_with(raw_path=raw))
    assert_error(response, 404, "not-found")


@pytest.mark.parametrize("task_id", ["a\nb", "x\n", ".", "..", "./x", "x/..", "a/./b", "%2E"])
def test_ids_with_newlines_and_dot_segments_are_reachable(
    server: Running, client: httpx.Client, task_id: str
) -> None:
    server.book.create(id=task_id, now_ms=NOW, ttl_ms=60_000, max_attempts=1)
    task = client.get(url(task_id))
    assert task.status_code == 200, task.text
    assert task.json()["id"] == task_id
    events = client.get(url(task_id, "events"), params={"cursor": "0"}).json()
    assert events["task"]["id"] == task_id
    refused = client.post(url(task_id, "delivery"), headers={"Idempotency-Key": "k"})
    assert_error(refused, 409, "not-succeeded")
    # A browser drops "." and ".." segments even as %2E: the page sends the id in the query.
    query = client.get("/api/tasks//events", params={"id": task_id, "cursor": "0"})
    assert query.json()["task"]["id"] == task_id
    assert client.get("/api/tasks/", params={"id": task_id}).json()["id"] == task_id


def test_idempotency_key_is_read_as_utf8_like_the_cli_sends_it(
    server: Running, client: httpx.Client
) -> None:
    run_task(server.book, "u", steps=1)
    key = "clé-7 ✓"
    first = client.post(url("u", "delivery"), headers={b"Idempotency-Key": key.encode()})
    assert first.status_code == 200
    assert first.json()["reason"] == "delivered"
    # `asyncbook deliver u --key 'clé-7 ✓'` calls the book with the same text: same key.
    again = server.book.deliver_result("u", key, NOW)
    assert again.reason == "duplicate-delivery"
    assert again.receipt is not None
    assert again.receipt.delivered_at_ms == first.json()["receipt"]["deliveredAtMs"]
    latin = client.post(url("u", "delivery"), headers={b"Idempotency-Key": b"cl\xe9-7"})
    assert assert_error(latin, 400, "invalid-request")["field"] == "idempotencyKey"


# -- resume ------------------------------------------------------------------------------


def test_events_resume_caught_up_delta_and_snapshot(server: Running, client: httpx.Client) -> None:
    run_task(server.book, "r", steps=10)  # versions 1..12
    delta = client.get(url("r", "events"), params={"cursor": "9"}).json()
    assert delta["mode"] == "delta"
    assert [entry["version"] for entry in delta["events"]] == [10, 11, 12]
    assert client.get(url("r", "events"), params={"cursor": "12"}).json()["mode"] == "caught-up"
    assert client.get(url("r", "events"), params={"cursor": "99"}).json()["mode"] == "caught-up"
    snapshot = client.get(url("r", "events"), params={"cursor": "1"}).json()
    assert snapshot["mode"] == "snapshot"
    assert snapshot["events"] == []
    assert snapshot["task"]["version"] == 12


@pytest.mark.parametrize("cursor", ["-1", "1.5", "x", "", " ", "99999999999999999999", "1e3"])
def test_events_rejects_bad_cursors(server: Running, client: httpx.Client, cursor: str) -> None:
    server.book.create(id="r", now_ms=NOW, ttl_ms=60_000, max_attempts=1)
    response = client.get(url("r", "events"), params={"cursor": cursor})
    assert assert_error(response, 400, "invalid-request")["field"] == "cursor"


# -- delivery ------------------------------------------------------------------------------


def test_delivery_once_per_key_and_never_another_tasks_receipt(
    server: Running, client: httpx.Client
) -> None:
    run_task(server.book, "a", steps=1)
    run_task(server.book, "b", steps=1)
    first = client.post(url("a", "delivery"), headers={"Idempotency-Key": "order-7"})
    assert first.status_code == 200
    assert first.json()["reason"] == "delivered"
    assert first.json()["receipt"]["resultRef"] == "ref:a"
    again = client.post(url("a", "delivery"), headers={"Idempotency-Key": "order-7"})
    assert again.status_code == 200
    assert again.json()["reason"] == "duplicate-delivery"
    assert again.json()["receipt"] == first.json()["receipt"]
    other = client.post(url("b", "delivery"), headers={"Idempotency-Key": "order-7"})
    body = assert_error(other, 409, "conflict")
    assert "receipt" not in body
    assert "ref:a" not in other.text
    assert "deliveredAtMs" not in other.text


def test_delivery_refusals(server: Running, client: httpx.Client) -> None:
    server.book.create(id="q", now_ms=NOW, ttl_ms=60_000, max_attempts=1)
    response = client.post(url("q", "delivery"), headers={"Idempotency-Key": "k"})
    assert_error(response, 409, "not-succeeded")
    missing = client.post(url("q", "delivery"))
    assert assert_error(missing, 400, "invalid-request")["field"] == "idempotencyKey"
    blank = client.post(url("q", "delivery"), headers={b"Idempotency-Key": b"\xa0"})
    assert_error(blank, 400, "invalid-request")


# -- metrics and schema ----------------------------------------------------------------------


def test_metrics_are_prometheus_text(server: Running, client: httpx.Client) -> None:
    run_task(server.book, "done", steps=2)
    server.book.apply("done", StartEvent(at_ms=NOW + 600, worker="w"), callback_id="cb")
    server.book.apply("done", StartEvent(at_ms=NOW + 601, worker="w"), callback_id="cb")
    server.book.create(id="late", now_ms=0, ttl_ms=1, max_attempts=1)
    response = client.get("/metrics")
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    assert 'asyncbook_tasks{state="succeeded"} 1.0' in text
    assert 'asyncbook_tasks{state="queued"} 1.0' in text
    assert 'asyncbook_transitions_total{reason="started"} 1.0' in text
    assert 'asyncbook_transitions_total{reason="progress"} 2.0' in text
    assert 'asyncbook_transitions_total{reason="succeeded"} 1.0' in text
    assert 'asyncbook_transitions_total{reason="terminal-conflict"} 1.0' in text
    assert "asyncbook_duplicate_callbacks_total 1.0" in text
    assert 'reason="duplicate-callback"' not in text
    assert "# TYPE asyncbook_sweep_lateness_seconds gauge" in text
    lateness = float(text.split("\nasyncbook_sweep_lateness_seconds ")[1].split()[0])
    assert lateness > 1_000_000  # "late" has been overdue since the epoch
    parsed = {family.name: family.type for family in text_string_to_metric_families(text)}
    assert parsed["asyncbook_transitions"] == "counter"  # what a Prometheus scraper reads
    assert parsed["asyncbook_tasks"] == "gauge"


def test_openapi_schema_describes_every_endpoint(client: httpx.Client) -> None:
    schema = client.get("/openapi.json").json()
    assert schema["openapi"].startswith("3.")
    assert {
        "/api/tasks",
        "/api/tasks/{id}",
        "/api/tasks/{id}/events",
        "/api/tasks/{id}/stream",
        "/api/tasks/{id}/delivery",
        "/api/tasks/{id}/cancel",
        "/metrics",
    } <= set(schema["paths"])
    assert "AsyncTask" in schema["components"]["schemas"]


def test_pages_and_assets_are_served(client: httpx.Client) -> None:
    index = client.get("/")
    assert index.status_code == 200
    assert "text/html" in index.headers["content-type"]
    assert "/static/index.js" in index.text
    assert "/static/task.js" in client.get("/task", params={"id": "x"}).text
    for asset in ("app.css", "common.js", "index.js", "task.js"):
        assert client.get(f"/static/{asset}").status_code == 200
    assert "http" not in client.get("/static/index.js").text  # no CDN, no remote anything


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("DELETE", "/api/tasks"),
        ("POST", "/"),
        ("PUT", "/task"),
        ("POST", "/api/changes"),
        ("POST", "/metrics"),
        ("POST", "/openapi.json"),
        ("POST", "/static/app.css"),
        ("POST", "/api/tasks/a"),
        ("DELETE", "/api/tasks/a/events"),
        ("GET", "/api/tasks/a/delivery"),
        ("GET", "/api/tasks/a/cancel"),
        ("PUT", "/api/tasks/a/cancel"),
    ],
)
def test_every_405_says_what_is_allowed(client: httpx.Client, method: str, path: str) -> None:
    response = client.request(method, path)
    assert_error(response, 405, "method-not-allowed")
    allowed = {name.strip() for name in response.headers["allow"].split(",")}
    assert allowed
    assert method not in allowed


def test_openapi_documents_401_and_its_parameters(client: httpx.Client) -> None:
    schema = client.get("/openapi.json").json()
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            if operation.get("security", schema["security"]):
                assert "401" in operation["responses"], (method, path)
    listing = {p["name"]: p for p in schema["paths"]["/api/tasks"]["get"]["parameters"]}
    assert listing["state"]["schema"] == {"type": "string", "enum": ["", *STATE_NAMES]}
    assert listing["limit"]["schema"]["minimum"] == 1
    assert listing["limit"]["schema"]["maximum"] == 1000
    delivery = schema["paths"]["/api/tasks/{id}/delivery"]["post"]["parameters"]
    key = next(p for p in delivery if p["name"] == "Idempotency-Key")
    assert key["in"] == "header"
    assert key["required"] is True
    assert key["schema"]["type"] == "string"
    assert key["schema"]["minLength"] == 1
    assert "UTF-8" in key["description"]
    stream = schema["paths"]["/api/tasks/{id}/stream"]["get"]["parameters"]
    for parameter in stream[1:]:
        assert parameter["schema"]["minimum"] == 0


# -- streams ---------------------------------------------------------------------------------


def stream(client: httpx.Client, task_id: str, **headers: str) -> list[dict[str, Any]]:
    with client.stream("GET", url(task_id, "stream"), headers=headers) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        return read_sse(response)


def test_stream_follows_a_running_task_to_its_end(server: Running, client: httpx.Client) -> None:
    server.book.create(id="live", now_ms=NOW, ttl_ms=10_000_000, max_attempts=1)
    hub = server.app.state.hub

    def work() -> None:
        while hub.watcher_count == 0:
            time.sleep(0.01)
        time.sleep(0.1)
        run_task(server.book, "live", 10, 0.05)

    worker = threading.Thread(target=work)
    worker.start()
    events = stream(client, "live")
    worker.join()
    assert events[0]["event"] == "task"
    assert events[0]["id"] == 0
    changes = [e["id"] for e in events if e["event"] == "change"]
    assert changes == list(range(1, 13))
    final = [e for e in events if e["event"] == "task"][-1]
    assert final["data"]["state"] == "succeeded"
    assert final["data"]["progress"] == 100
    assert "history" not in final["data"]
    assert events[-1]["event"] == "end"
    assert events[-1]["data"] == {"state": "succeeded", "version": 12}


def test_stream_reconnect_mid_history_gets_the_delta(server: Running, client: httpx.Client) -> None:
    run_task(server.book, "r", steps=10)  # versions 1..12, retention 8
    events = stream(client, "r", **{"Last-Event-ID": "7"})
    assert [e["id"] for e in events if e["event"] == "change"] == [8, 9, 10, 11, 12]
    assert [e["event"] for e in events][-2:] == ["task", "end"]
    assert not any(e["event"] == "snapshot" for e in events)


def test_stream_reconnect_from_too_far_back_gets_a_snapshot(
    server: Running, client: httpx.Client
) -> None:
    run_task(server.book, "r", steps=10)
    events = stream(client, "r", **{"Last-Event-ID": "2"})
    assert [e["event"] for e in events] == ["snapshot", "end"]
    assert events[0]["id"] == 12
    assert len(events[0]["data"]["history"]) == 12
    fresh = stream(client, "r")  # no Last-Event-ID: cursor 0
    assert [e["event"] for e in fresh] == ["snapshot", "end"]


def test_stream_caught_up_on_a_terminal_task_ends_at_once(
    server: Running, client: httpx.Client
) -> None:
    run_task(server.book, "r", steps=1)
    events = stream(client, "r", **{"Last-Event-ID": "3"})
    assert [e["event"] for e in events] == ["task", "end"]


def test_stream_query_cursor_and_bad_last_event_id(server: Running, client: httpx.Client) -> None:
    run_task(server.book, "r", steps=1)
    with client.stream("GET", url("r", "stream"), params={"cursor": "2"}) as response:
        assert [e["id"] for e in read_sse(response) if e["event"] == "change"] == [3]
    response = client.get(url("r", "stream"), headers={"Last-Event-ID": "abc"})
    assert assert_error(response, 400, "invalid-request")["field"] == "Last-Event-ID"


def test_watchers_cost_no_lookups_while_idle_and_one_per_change(
    server: Running, client: httpx.Client
) -> None:
    book = server.book
    book.create(id="w", now_ms=NOW, ttl_ms=10_000_000, max_attempts=1)
    book.apply("w", StartEvent(at_ms=NOW + 1, worker="w"))
    hub = server.app.state.hub
    results: list[list[dict[str, Any]]] = []

    def watch() -> None:
        with httpx.Client(base_url=server.url, timeout=20) as own:
            results.append(stream(own, "w", **{"Last-Event-ID": "1"}))

    threads = [threading.Thread(target=watch) for _ in range(20)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 10
    while hub.watcher_count < 20:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(0.3)
    idle = hub.lookups
    time.sleep(0.5)
    assert hub.lookups == idle  # nobody polls
    book.apply("w", ProgressEvent(at_ms=NOW + 2, progress=50, cursor="c"))
    book.apply("w", SucceedEvent(at_ms=NOW + 3, result_ref="r", result_hash="h"))
    for thread in threads:
        thread.join(15)
    assert len(results) == 20
    for events in results:
        assert [e["id"] for e in events if e["event"] == "change"] == [2, 3]
    assert hub.lookups - idle <= 2  # one lookup per change, shared by all 20 watchers


def test_changes_stream_relays_the_feed(server: Running) -> None:
    server.book.create(id="c", now_ms=NOW, ttl_ms=10_000_000, max_attempts=1)
    seen: list[dict[str, Any]] = []
    with (
        httpx.Client(base_url=server.url, timeout=10) as http,
        http.stream("GET", "/api/changes") as response,
    ):
        threading.Timer(0.3, lambda: run_task(server.book, "c", steps=2)).start()
        for line in response.iter_lines():
            if line.startswith("data: "):
                seen.append(json.loads(line[6:]))
                if seen[-1]["state"] == "succeeded":
                    break
    assert [change["version"] for change in seen] == [1, 2, 3, 4]
    assert seen[-1] == {"taskId": "c", "version": 4, "state": "succeeded", "progress": 100}


# -- auth ------------------------------------------------------------------------------------


def test_token_guards_everything_but_metrics() -> None:
    with (
        running_server(token=TOKEN) as server,
        httpx.Client(base_url=server.url, timeout=10) as client,
    ):
        run_task(server.book, "t", steps=1)
        for path in (
            "/api/tasks",
            url("t"),
            url("t", "events"),
            url("t", "stream"),
            "/openapi.json",
        ):
            response = client.get(path)
            assert_error(response, 401, "unauthorized")
            assert response.headers["www-authenticate"].startswith("Bearer")
            wrong = client.get(path, headers={"Authorization": "Bearer " + TOKEN[:-1]})
            assert_error(wrong, 401, "unauthorized")
        assert (
            client.post(url("t", "delivery"), headers={"Idempotency-Key": "k"}).status_code == 401
        )
        assert_error(client.post(url("t", "cancel")), 401, "unauthorized")
        good = {"Authorization": "Bearer " + TOKEN}
        assert client.get("/api/tasks", headers=good).status_code == 200
        assert client.get(url("t"), headers=good).json()["id"] == "t"
        assert stream(client, "t", **good)[-1]["event"] == "end"
        delivered = client.post(url("t", "delivery"), headers=good | {"Idempotency-Key": "k"})
        assert delivered.status_code == 200
        assert client.get("/metrics").status_code == 200
        page = client.get("/")
        assert page.status_code == 303
        assert page.headers["location"] == "/login"
        assert client.get("/static/app.css").status_code == 200


def test_login_cookie_opens_the_page_and_streams_but_not_posts() -> None:
    with (
        running_server(token=TOKEN) as server,
        httpx.Client(base_url=server.url, timeout=10) as client,
    ):
        run_task(server.book, "t", steps=1)
        assert client.post("/login", data={"token": "nope"}).status_code == 401
        assert COOKIE not in client.cookies
        login = client.post("/login", data={"token": TOKEN})
        assert login.status_code == 303
        assert client.get("/").status_code == 200
        assert client.get(url("t")).status_code == 200
        assert stream(client, "t")[-1]["event"] == "end"
        post = client.post(url("t", "delivery"), headers={"Idempotency-Key": "k"})
        assert post.status_code == 401
        assert client.post(url("t", "cancel")).status_code == 401


def test_without_token_only_loopback_binds() -> None:
    check_bind("127.0.0.1", None)
    check_bind("::1", None)
    check_bind("localhost", None)
    check_bind("0.0.0.0", "token")
    for host in ("0.0.0.0", "::", "192.0.2.1"):
        with pytest.raises(AsyncBookError, match="ASYNCBOOK_API_TOKEN") as caught:
            check_bind(host, None)
        assert caught.value.field == "host"
    assert is_loopback("127.8.9.10")
    assert not is_loopback("no-such-host.invalid")


def test_token_compare() -> None:
    assert token_matches("abc", "abc")
    assert not token_matches("abd", "abc")
    assert not token_matches(None, "abc")
    assert not token_matches("", "abc")
    assert token_matches("ü", "ü")


def test_split_task_path() -> None:
    assert split_task_path(b"/api/tasks/a%2Fb/stream") == ("a/b", "stream")
    assert split_task_path(b"/api/tasks/a/b") == ("a/b", None)
    assert split_task_path(b"/api/tasks/stream") == ("stream", None)
    assert split_task_path(b"/api/tasks/%C3%BC?x=1") == ("ü", None)
    with pytest.raises(AsyncBookError):
        split_task_path(b"/api/tasks/")
    assert split_task_path(b"/api/tasks//stream", "..") == ("..", "stream")
    assert split_task_path(b"/api/tasks/x/stream", "..") == ("x", "stream")
    assert split_task_path(b"/api/ta%73ks/x") == ("x", None)
    with pytest.raises(AsyncBookError):
        split_task_path(b"/api/tasks%2Fx")
    assert task_path("..", "stream") == "/api/tasks/%2E%2E/stream"
    assert task_path("a\n.") == "/api/tasks/a%0A."
    assert task_path("a/b c%", "events") == "/api/tasks/a%2Fb%20c%25/events"


@pytest.mark.parametrize("shared", ["explicit server", "default server"])
def test_embedded_fakeredis_book_streams_live(shared: str) -> None:
    """The demo's embedded mode: RedisBook on fakeredis, the feed on the same server."""
    if shared == "explicit server":
        fake = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    else:
        fake = fakeredis.FakeRedis()
    with (
        running_server(client=fake) as server,
        httpx.Client(base_url=server.url, timeout=10) as client,
    ):
        server.book.create(id="e", now_ms=NOW, ttl_ms=10_000_000, max_attempts=1)
        hub = server.app.state.hub

        def work() -> None:
            while hub.watcher_count == 0:
                time.sleep(0.01)
            run_task(server.book, "e", 3, 0.05)

        worker = threading.Thread(target=work)
        worker.start()
        events = stream(client, "e")
        worker.join()
    assert [e["id"] for e in events if e["event"] == "change"] == [1, 2, 3, 4, 5]
    assert events[-1]["data"]["state"] == "succeeded"


def test_feed_for_follows_the_books_channel_through_its_client() -> None:
    book = RedisBook(redis.Redis.from_url(WEB_REDIS_URL), namespace="feed-url")
    feed = feed_for(book)
    assert isinstance(feed, BookChangeFeed)
    assert feed.channel == book.keys.changes_channel
    assert feed.client is book.client
    book.client.close()


def test_streams_lose_nothing_when_the_change_feed_connection_drops() -> None:
    """The server's pub/sub link is killed mid-task: it resubscribes and looks tasks up."""
    name = f"feed-{uuid.uuid4().hex[:8]}"
    admin = redis.Redis.from_url(WEB_REDIS_URL)
    book = RedisBook(admin, namespace=f"web-{uuid.uuid4().hex[:12]}")
    channel = book.keys.changes_channel
    named_url = f"{WEB_REDIS_URL}?client_name={name}"
    feed = BookChangeFeed(redis.Redis.from_url(named_url), channel)
    book.create(id="k", now_ms=NOW, ttl_ms=10_000_000, max_attempts=1)

    def feed_client() -> int | None:
        for info in admin.client_list(_type="pubsub"):
            if info.get("name") == name:
                return int(info["id"])
        return None

    try:
        with (
            BackgroundServer(book, feed) as server,
            httpx.Client(base_url=server.url, timeout=20) as client,
        ):
            hub = server.app.state.hub

            def work() -> None:
                deadline = time.monotonic() + 10
                # The stream has its first event (the task as it is) before anything changes:
                # a change before that would make the snapshot, not version 0, come first.
                while 0 not in seen or feed_client() is None:
                    assert time.monotonic() < deadline, "no first event, or no change feed"
                    time.sleep(0.01)
                book.apply("k", StartEvent(at_ms=NOW + 1, worker="w"))
                time.sleep(0.2)
                client_id = feed_client()
                killed.append(
                    admin.client_kill_filter(_id=None if client_id is None else str(client_id))
                )
                # While the feed is away: these changes are never heard on the channel.
                for p in (10, 20, 30):
                    book.apply("k", ProgressEvent(at_ms=NOW + p, progress=p, cursor="c"))
                # No change follows until the stream has 2..4: only the feed's reset can
                # bring them (it looks every watched task up after resubscribing).
                deadline = time.monotonic() + 10
                while 4 not in seen and time.monotonic() < deadline:
                    time.sleep(0.01)
                caught_up.append(4 in seen)
                book.apply("k", SucceedEvent(at_ms=NOW + 99, result_ref="r", result_hash="h"))

            seen: list[int] = []
            caught_up: list[bool] = []
            killed: list[int] = []
            worker = threading.Thread(target=work)
            worker.start()
            with client.stream("GET", url("k", "stream")) as response:
                for line in response.iter_lines():
                    if line.startswith("id: "):
                        seen.append(int(line[4:]))
            worker.join()
            resets = hub.resets
            metrics = client.get("/metrics").text
    finally:
        delete_namespace(admin, book.namespace)
        admin.close()
    assert killed == [1]
    assert resets >= 2  # subscribed, and subscribed again after the kill
    assert f"asyncbook_change_feed_connects_total {float(resets)}" in metrics
    assert caught_up == [True]
    assert sorted(set(seen)) == [0, 1, 2, 3, 4, 5]
