"""A resend over HTTP on the audit trail: the operator's resend (one task or a search's) is
recorded as its principal, in the resend's own script call, and read back through
``/api/tasks/{id}/audit``; the read token is refused both routes and changes nothing."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from asyncbook.web import AccessRules
from asyncbook.web._paths import task_path

from ..support.retries import ended_task, kept_message, script_calls, sent
from ..support.web_server import WEB_REDIS_URL, Running, assert_error, running_server

pytestmark = pytest.mark.redis

OPERATOR = "operator-token-0123456789"
READER = "reader-token-0123456789ab"
AS_OPERATOR = {"Authorization": f"Bearer {OPERATOR}"}
AS_READER = {"Authorization": f"Bearer {READER}"}


@pytest.fixture
def server() -> Iterator[Running]:
    """A server with both tokens whose resends go to the web test Redis as a broker."""
    access = AccessRules.of(token=OPERATOR, read_token=READER)
    with running_server(access=access, broker_url=WEB_REDIS_URL) as running:
        yield running


def audit_of(client: httpx.Client, task_id: str) -> list[dict[str, object]]:
    answer = client.get(task_path(task_id, "audit"), headers=AS_READER)
    assert answer.status_code == 200, answer.text
    entries: list[dict[str, object]] = answer.json()["entries"]
    return entries


def test_an_operator_s_retry_is_audited_in_the_same_script_call(
    server: Running, client: httpx.Client, queue: str
) -> None:
    ended_task(server.book, "first", message=kept_message(queue=queue))
    engine = server.book.engine  # resend.lua loaded first: NOSCRIPT would add an EVAL
    engine.slot_client().script_load(engine.scripts.resend.source)
    with script_calls() as shas:
        answer = client.post(
            task_path("first", "resend"), json={"reason": "upstream back"}, headers=AS_OPERATOR
        )
    assert answer.status_code == 200, answer.text
    new_id = answer.json()["retriedAs"]
    resend = server.book.engine.scripts.resend  # by FCALL (EVALSHA where no functions)
    assert shas in ([resend.function.decode()], [resend.sha])  # no separate audit.lua call
    [entry] = audit_of(client, "first")
    assert entry.pop("atMs")
    assert entry == {
        "actor": "token:operator",
        "action": "resend",
        "taskId": "first",
        "reason": "upstream back",
        "outcome": "retried",
        "retriedAs": new_id,
    }
    logged = client.get("/api/audit", headers=AS_READER).json()["entries"]
    assert [(e["taskId"], e["retriedAs"]) for e in logged] == [("first", new_id)]


def test_a_bulk_retry_writes_one_entry_per_task(
    server: Running, client: httpx.Client, queue: str
) -> None:
    for task_id in ("a", "b", "c"):
        ended_task(server.book, task_id, message=kept_message(queue=queue), name="app.bulk")
    answer = client.post(
        "/api/resend", params={"name": "app.bulk"}, json={"reason": "bulk"}, headers=AS_OPERATOR
    )
    assert answer.status_code == 200, answer.text
    made = {r["taskId"]: r["retriedAs"] for r in answer.json()["results"]}
    assert sorted(made) == ["a", "b", "c"]
    for task_id, new_id in made.items():
        [entry] = audit_of(client, task_id)
        assert (entry["actor"], entry["outcome"], entry["retriedAs"]) == (
            "token:operator",
            "retried",
            new_id,
        )
        assert entry["reason"] == "bulk"
    assert len(sent(queue)) == 3


def test_a_refused_retry_is_audited(server: Running, client: httpx.Client, queue: str) -> None:
    ended_task(server.book, "once", message=kept_message(queue=queue))
    new_id = client.post(task_path("once", "resend"), headers=AS_OPERATOR).json()["retriedAs"]
    again = client.post(task_path("once", "resend"), json={"reason": "2"}, headers=AS_OPERATOR)
    assert_error(again, 409, "already-retried")
    refused, made = audit_of(client, "once")  # newest first
    assert (refused["outcome"], refused["retriedAs"], refused["reason"]) == (
        "already-retried",
        new_id,
        "2",
    )
    assert (made["outcome"], made["retriedAs"], made.get("reason")) == ("retried", new_id, None)
    assert_error(client.post(task_path("nobody", "resend"), headers=AS_OPERATOR), 404, "not-found")
    assert audit_of(client, "nobody") == []


def test_the_read_token_is_refused_both_retry_routes(
    server: Running, client: httpx.Client, queue: str
) -> None:
    ended_task(server.book, "t", message=kept_message(queue=queue))
    one = client.post(task_path("t", "resend"), json={"reason": "x"}, headers=AS_READER)
    assert_error(one, 403, "forbidden")
    bulk = client.post("/api/resend", json={"reason": "x"}, headers=AS_READER)
    assert_error(bulk, 403, "forbidden")
    assert sent(queue) == []
    assert server.book.count_by_state()["queued"] == 0
    assert audit_of(client, "t") == []
    info = server.book.info("t")
    assert info is not None
    assert info.retried_as is None


def test_a_retry_not_sent_is_audited_as_its_new_task_s_cancel() -> None:
    access = AccessRules.of(token=OPERATOR, read_token=READER)
    # Nothing listens on port 1: the broker cannot be reached.
    with (
        running_server(access=access, broker_url="redis://127.0.0.1:1/0") as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        ended_task(server.book, "t", message=kept_message())
        refused = client.post(task_path("t", "resend"), headers=AS_OPERATOR)
        new_id = assert_error(refused, 503, "not-sent")["retriedAs"]
        [made] = audit_of(client, "t")
        assert (made["outcome"], made["retriedAs"]) == ("retried", new_id)
        [cancel] = audit_of(client, new_id)
        assert (cancel["actor"], cancel["action"], cancel["outcome"]) == (
            "token:operator",
            "cancel",
            "cancelled",
        )
        assert str(cancel["reason"]).startswith("resend not sent")
