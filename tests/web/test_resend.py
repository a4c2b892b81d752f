"""``POST /api/tasks/<id>/resend`` and ``POST /api/resend`` over HTTP, on RedisBook with real
Redis; the broker is a Redis too, whose queue list is read back to see what was sent."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx
import pytest

from asyncbook import RedisBook
from asyncbook.celery import Resender
from asyncbook.web import BackgroundServer
from asyncbook.web._auth import COOKIE
from asyncbook.web._paths import task_path

from ..support.retries import ended_task, kept_message, sent
from ..support.web_server import WEB_REDIS_URL, Running, assert_error, running_server

pytestmark = pytest.mark.redis

TOKEN = "retry-token-0123456789"
SAME_SITE = {"Sec-Fetch-Site": "same-origin"}


@pytest.fixture
def server() -> Iterator[Running]:
    """A status server whose resends go to the web test Redis as a broker."""
    with running_server(broker_url=WEB_REDIS_URL) as running:
        yield running


def retry(client: httpx.Client, task_id: str, **options: Any) -> httpx.Response:
    return client.post(task_path(task_id, "resend"), **options)


def queued(book: RedisBook) -> int:
    return book.count_by_state()["queued"]


def test_a_retry_sends_the_kept_body_as_a_fresh_task(
    server: Running, client: httpx.Client, queue: str
) -> None:
    message = kept_message(queue=queue)
    ended_task(server.book, "first", message=message)
    answer = retry(client, "first", json={"reason": "upstream back"})
    assert answer.status_code == 200, answer.text
    new_id = answer.json()["retriedAs"]
    assert answer.json() == {"taskId": "first", "retriedAs": new_id, "code": None, "message": None}
    [published] = sent(queue)
    # The body as published, byte for byte, with its content type and encoding.
    assert base64.b64decode(published["body"]) == message.body
    assert published["content-type"] == "application/json"
    assert published["content-encoding"] == "utf-8"
    headers = published["headers"]
    new_task = server.book.get(new_id)
    assert new_task is not None
    assert new_task.state.value == "queued"
    # Celery's headers for a fresh task: its own root, no parent, no retries, no eta.
    assert headers["id"] == headers["root_id"] == new_id
    assert (headers["parent_id"], headers["retries"], headers["eta"]) == (None, 0, None)
    expires = datetime.fromisoformat(headers["expires"]).timestamp() * 1000
    assert abs(expires - new_task.expires_at_ms) < 1
    kept = ("lang", "task", "argsrepr", "kwargsrepr", "timelimit")
    assert {key: headers[key] for key in kept} == {key: message.headers[key] for key in kept}
    assert published["properties"]["correlation_id"] == new_id
    assert published["properties"]["priority"] == 3
    # The same life and attempts as the original; linked both ways.
    first = server.book.get("first")
    assert first is not None
    assert new_task.max_attempts == first.max_attempts
    info = server.book.info(new_id)
    assert info is not None
    # A server without access rules names nobody: "anonymous", as a cancel there.
    assert (info.retry_of, info.retry_reason, info.retried_by) == (
        "first",
        "upstream back",
        "anonymous",
    )
    assert client.get(task_path("first")).json()["info"]["retriedAs"] == new_id
    assert client.get(task_path(new_id)).json()["info"]["retryOf"] == "first"


def test_the_kept_message_is_never_shown(server: Running, client: httpx.Client) -> None:
    message = kept_message(name="app.secretive")
    ended_task(server.book, "t", message=message, name="app.secretive")
    body = base64.b64encode(message.body).decode()
    for path in (task_path("t"), "/api/search?name=app.secretive", "/api/tasks?q=t"):
        answer = client.get(path)
        assert answer.status_code == 200
        assert body not in answer.text
        assert "contentEncoding" not in answer.text
        assert "routingKey" not in answer.text


def test_refusals_name_what_is_wrong_and_change_nothing(
    server: Running, client: httpx.Client, queue: str
) -> None:
    book = server.book
    assert assert_error(retry(client, "nobody"), 404, "not-found")["field"] == "taskId"
    ended_task(book, "waiting", state="queued", message=kept_message(queue=queue))
    refused = assert_error(retry(client, "waiting"), 409, "not-retryable")
    assert "queued" in refused["message"]
    ended_task(book, "plain")  # published without asyncbook_keep_messages
    refused = assert_error(retry(client, "plain"), 409, "no-message")
    assert refused["field"] == "asyncbook_keep_messages"
    assert "asyncbook_keep_messages" in refused["message"]
    assert "result_extended" in refused["message"]
    ended_task(book, "huge", message=json.dumps({"v": 1, "omittedBytes": 2_000_000, "limit": 9}))
    refused = assert_error(retry(client, "huge"), 409, "message-too-large")
    assert "asyncbook_keep_message_limit" in refused["message"]
    assert_error(retry(client, "plain", json={"reason": 7}), 400, "invalid-request")
    assert_error(retry(client, "plain", json={"why": "x"}), 400, "invalid-request")
    assert queued(book) == 1  # "waiting" only: nothing was created
    assert sent(queue) == []
    # Resent once: a second resend (a double click) names the first and sends nothing.
    ended_task(book, "once", state="cancelled", message=kept_message(queue=queue))
    new_id = retry(client, "once").json()["retriedAs"]
    again = assert_error(retry(client, "once"), 409, "already-retried")
    assert again["retriedAs"] == new_id
    assert new_id in again["message"]
    assert len(sent(queue)) == 1


def test_without_a_broker_a_retry_is_refused() -> None:
    with running_server() as server, httpx.Client(base_url=server.url) as client:
        ended_task(server.book, "t", message=kept_message())
        refused = assert_error(retry(client, "t"), 503, "no-broker")
        assert "--broker" in refused["message"]
        assert "ASYNCBOOK_BROKER_URL" in refused["message"]
        assert_error(client.post("/api/resend"), 503, "no-broker")
        info = server.book.info("t")
        assert info is not None
        assert info.retried_as is None


def test_a_message_the_broker_did_not_take_leaves_its_new_task_cancelled() -> None:
    # Nothing listens on port 1: the broker cannot be reached.
    broker = "redis://127.0.0.1:1/0"
    with (
        running_server(broker_url=broker) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        ended_task(server.book, "t", message=kept_message())
        refused = assert_error(retry(client, "t"), 503, "not-sent")
        new_task = server.book.get(refused["retriedAs"])
        assert new_task is not None
        assert new_task.state.value == "cancelled"
        assert new_task.error is not None
        assert new_task.error.startswith("resend not sent")
        assert queued(server.book) == 0


CROSS_SITE = [{"Sec-Fetch-Site": "cross-site"}, {"Origin": "http://evil.example"}]


@pytest.mark.parametrize("headers", CROSS_SITE)
def test_a_cross_site_retry_is_refused(
    server: Running, client: httpx.Client, headers: dict[str, str], queue: str
) -> None:
    ended_task(server.book, "t", message=kept_message(queue=queue))
    assert_error(retry(client, "t", headers=headers), 403, "cross-site")
    assert_error(client.post("/api/resend", headers=headers), 403, "cross-site")
    assert sent(queue) == []
    assert retry(client, "t", headers=SAME_SITE | {"Origin": server.url}).status_code == 200


def test_with_a_token_only_the_bearer_token_retries(queue: str) -> None:
    with (
        running_server(token=TOKEN, broker_url=WEB_REDIS_URL) as server,
        httpx.Client(base_url=server.url, timeout=10) as client,
    ):
        ended_task(server.book, "t", message=kept_message(queue=queue))
        assert_error(retry(client, "t"), 401, "unauthorized")
        assert client.post("/login", data={"token": TOKEN}).status_code == 303
        assert COOKIE in client.cookies
        assert_error(retry(client, "t", headers=SAME_SITE), 401, "unauthorized")
        assert_error(client.post("/api/resend", headers=SAME_SITE), 401, "unauthorized")
        assert sent(queue) == []
        bearer = {"Authorization": "Bearer " + TOKEN}
        assert retry(client, "t", headers=bearer | SAME_SITE).status_code == 200


def test_a_bulk_retry_sends_a_search_s_failed_tasks_once(
    server: Running, client: httpx.Client, queue: str
) -> None:
    book = server.book
    for n in range(5):
        ended_task(
            book, f"f{n}", message=kept_message(name="app.bulk", queue=queue), name="app.bulk"
        )
    ended_task(book, "c0", "cancelled", kept_message(name="app.bulk", queue=queue), "app.bulk")
    ended_task(book, "other", message=kept_message(queue=queue))
    answer = client.post("/api/resend?name=app.bulk&limit=3", json={"reason": "deploy fixed it"})
    assert answer.status_code == 200, answer.text
    first = answer.json()
    assert (first["retried"], first["refused"]) == (3, 0)
    assert first["nextAfter"] is not None
    rest = client.post(f"/api/resend?name=app.bulk&after={first['nextAfter']}").json()
    assert (rest["retried"], rest["refused"], rest["nextAfter"]) == (2, 0, None)
    ids = {result["taskId"] for result in first["results"] + rest["results"]}
    assert ids == {f"f{n}" for n in range(5)}  # failed only: the default state
    assert len(sent(queue)) == 5
    again = client.post("/api/resend?name=app.bulk&limit=1000").json()
    assert (again["retried"], again["refused"]) == (0, 5)
    assert {result["code"] for result in again["results"]} == {"already-retried"}
    cancelled = client.post("/api/resend?name=app.bulk&state=cancelled").json()
    assert (cancelled["retried"], cancelled["results"][0]["taskId"]) == (1, "c0")
    assert len(sent(queue)) == 6


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("state=queued", "state"),
        ("state=succeeded", "state"),
        ("limit=1001", "limit"),
        ("limit=0", "limit"),
        ("since=yesterday", "since"),
        ("sort=sideways", "sort"),
    ],
)
def test_a_bad_bulk_retry_names_its_field(
    server: Running, client: httpx.Client, query: str, field: str
) -> None:
    ended_task(server.book, "t", message=kept_message())
    refused = assert_error(client.post(f"/api/resend?{query}"), 400, "invalid-request")
    assert refused["field"] == field
    info = server.book.info("t")
    assert info is not None
    assert info.retried_as is None


def _same_but_ids(answer: dict[str, Any], ids: dict[str, str]) -> dict[str, Any]:
    """``answer`` with each id of ``ids`` (and the message naming it) written as its key."""
    text = json.dumps(answer)
    for placeholder, task_id in ids.items():
        text = text.replace(task_id, placeholder)
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def test_the_old_routes_answer_exactly_as_the_new_ones(
    server: Running, client: httpx.Client, queue: str
) -> None:
    book = server.book
    for task_id in ("n1", "o1"):
        name = f"app.{task_id}"
        ended_task(book, task_id, message=kept_message(queue=queue, name=name), name=name)
    ended_task(book, "plain")
    answers: dict[str, list[httpx.Response]] = {}
    for name, task_id in (("resend", "n1"), ("retry", "o1")):
        answers[name] = [
            client.post(task_path(task_id, name), json={"reason": "same"}),
            client.post(task_path(task_id, name)),  # already resent
            client.post(task_path("plain", name)),  # no kept message
            client.post(task_path("nobody", name)),
            client.post(task_path(task_id, name), json={"why": "x"}),
            client.post(f"/api/{name}?state=queued"),
            client.post(f"/api/{name}?name=app.{task_id}&state=failed"),
        ]
    new, old = answers["resend"], answers["retry"]
    assert [a.status_code for a in new] == [a.status_code for a in old]
    assert [a.status_code for a in new] == [200, 409, 409, 404, 400, 400, 200]
    new_ids = {"TASK": "n1", "NEW": new[0].json()["retriedAs"]}
    old_ids = {"TASK": "o1", "NEW": old[0].json()["retriedAs"]}
    for one, other in zip(new, old, strict=True):
        assert one.headers["content-type"] == other.headers["content-type"]
        assert _same_but_ids(one.json(), new_ids) == _same_but_ids(other.json(), old_ids)
    assert new[-1].json()["results"][0]["code"] == "already-retried", new[-1].json()
    assert len(sent(queue)) == 2
    for task_id in ("n1", "o1"):
        assert [e.action for e in book.audit(task_id)] == ["resend"] * 3


def test_the_api_document_marks_the_old_routes_deprecated(client: httpx.Client) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    for new, old in (
        ("/api/tasks/{id}/resend", "/api/tasks/{id}/retry"),
        ("/api/resend", "/api/retry"),
    ):
        assert "deprecated" not in paths[new]["post"]
        assert paths[old]["post"]["deprecated"] is True
        assert "0.3.0" in paths[old]["post"]["description"]
        for part in ("parameters", "requestBody", "responses", "summary"):
            assert paths[old]["post"].get(part) == paths[new]["post"].get(part)
    deprecated = sorted(
        path for path, item in paths.items() for op in item.values() if op.get("deprecated")
    )
    assert deprecated == ["/api/retry", "/api/tasks/{id}/retry"]


def test_the_old_keyword_retrier_still_gives_the_server_its_resender(queue: str) -> None:
    with running_server() as plain:
        with pytest.warns(DeprecationWarning, match="resender="):
            server = BackgroundServer(plain.book, retrier=Resender(plain.book, WEB_REDIS_URL))
        with server, httpx.Client(base_url=server.url) as client:
            ended_task(plain.book, "t", message=kept_message(queue=queue))
            assert retry(client, "t").status_code == 200  # not 503 no-broker
            assert len(sent(queue)) == 1


def test_the_task_page_asks_a_signed_in_operator_for_the_token_to_resend() -> None:
    with (
        running_server(token=TOKEN) as guarded,
        httpx.Client(base_url=guarded.url, timeout=10) as client,
    ):
        client.post("/login", data={"token": TOKEN})
        page = client.get("/task", params={"id": "t"}).text
        assert '<button type="button" id="resend-open" hidden>Resend</button>' in page
        assert '<p id="resend-token-field">' in page  # the cookie is no change's
        assert "retry-" not in page
        index = client.get("/").text
        assert "/static/bulk-resend.js" in index
        assert "Resend these failed tasks" in index
        script = client.get("/static/bulk-resend.js")
        assert script.status_code == 200
        assert '"/api/resend?"' in script.text
