"""``GET /api/queues`` and the ``/queues`` page: a real app's queues on a Redis broker (a
worker holding unacked messages), the oldest task's age from the book, asyncbook's own
queue with the sweep's health; no broker, a broker down, bad parameters."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from asyncbook import MemoryBook
from asyncbook.celery import AmqpBroker, RedisBroker
from asyncbook.web import BackgroundServer
from asyncbook.web import _queues as web_queues

from ..support.books import delete_namespace
from ..support.broker import (
    AMQP_URL,
    CONSUMED_SENT,
    PREFETCHED,
    BusyBroker,
    amqp_answers,
    amqp_queue,
    busy_broker,
)
from ..support.celery import CELERY_URL, unique
from ..support.web_server import Running, assert_error, running_server


@pytest.fixture
def broker() -> Iterator[RedisBroker]:
    reader = RedisBroker(CELERY_URL)
    yield reader
    reader.close()


@pytest.fixture
def own() -> str:
    return unique("own")


@pytest.fixture
def server(broker: RedisBroker, own: str) -> Iterator[Running]:
    """A status server reading the Celery test Redis as its broker."""
    with running_server(broker=broker, own_queue=own) as running:
        yield running


@pytest.fixture
def busy(server: Running, own: str) -> Iterator[BusyBroker]:
    with busy_broker(server.book, own) as running:
        yield running


def _queues(answer: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {queue["name"]: queue for queue in answer["queues"]}


def test_each_queue_ready_per_priority_unacked_and_the_oldest_age(
    client: httpx.Client, busy: BusyBroker
) -> None:
    before = int(time.time() * 1000)
    answer = client.get("/api/queues").json()
    after = int(time.time() * 1000)
    queues = _queues(answer)
    consumed, prioritized = queues[busy.consumed], queues[busy.prioritized]
    assert (consumed["ready"], consumed["unacked"]) == (CONSUMED_SENT - PREFETCHED, PREFETCHED)
    assert prioritized["priorities"] == {"0": 1, "3": 1, "6": 0, "9": 2}
    assert (prioritized["ready"], prioritized["unacked"]) == (4, 0)
    # The oldest waiting message's task, created by the book when it was published.
    assert consumed["oldestTaskId"] == busy.consumed_ids[PREFETCHED]
    assert before - busy.sent_at_ms - 1_000 <= consumed["oldestAgeMs"]
    assert consumed["oldestAgeMs"] <= after - busy.sent_at_ms + 1_000
    assert consumed["oldestNote"] is None
    assert consumed["consumers"] is None
    assert prioritized["oldestTaskId"] in busy.prioritized_ids[:3]
    assert answer["broker"] == {
        "configured": True,
        "kind": "redis",
        "url": CELERY_URL,
        "problem": None,
    }
    assert answer["unacked"]["exact"]
    assert answer["unacked"]["total"] >= PREFETCHED
    assert answer["truncated"] is False


def test_asyncbooks_own_queue_and_the_sweeps_health(client: httpx.Client, busy: BusyBroker) -> None:
    answer = client.get("/api/queues").json()
    assert _queues(answer)[busy.own]["asyncbook"] is True
    own = answer["asyncbook"]
    assert own["queue"] == busy.own
    assert own["ready"] == 0
    # The very answer of /api/health, read at the same moment (the queues no online
    # worker consumes and the stranded tasks are the answer's own).
    health = client.get("/api/health").json()
    assert set(own["health"]) == set(health) - {"unconsumedQueues", "strandedTasks"}
    assert busy.prioritized in health["unconsumedQueues"]
    assert busy.prioritized in answer["unconsumed"]
    assert own["health"]["overdueTasks"] == health["overdueTasks"]


def test_an_untracked_task_has_no_age_and_says_why(
    client: httpx.Client, server: Running, busy: BusyBroker
) -> None:
    # The book forgets the oldest waiting task: it is untracked now.
    delete_namespace(server.book.client, server.book.namespace)
    queue = _queues(client.get("/api/queues").json())[busy.consumed]
    assert queue["oldestAgeMs"] is None
    assert queue["oldestNote"] == "an untracked task (not in the book)"


def test_named_queues_and_a_limit(client: httpx.Client, busy: BusyBroker, own: str) -> None:
    named = unique("named")
    answer = client.get("/api/queues", params={"queue": [named], "limit": "2"}).json()
    assert sorted(_queues(answer)) == sorted([own, named])
    assert answer["truncated"] is True
    assert _queues(answer)[named]["oldestNote"] == "no message waiting"


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "201"}, "limit"),
        ({"limit": "many"}, "limit"),
        ({"queue": "x" * 201}, "queue"),
        ({"queue": "bad\nname"}, "queue"),
        ({"queue": [f"q{n}" for n in range(51)]}, "queue"),
        ({"queue": ["", ""]}, "queue"),  # the schema's minLength: an empty name is refused
    ],
)
def test_a_bad_parameter_is_a_400_naming_it(
    client: httpx.Client, params: dict[str, Any], field: str
) -> None:
    body = assert_error(client.get("/api/queues", params=params), 400, "invalid-request")
    assert body["field"] == field


def test_without_a_broker_the_book_side_is_still_answered() -> None:
    with running_server() as server, httpx.Client(base_url=server.url) as client:
        response = client.get("/api/queues")
        page = client.get("/queues")
    assert response.status_code == 200
    answer = response.json()
    assert answer["broker"]["configured"] is False
    assert "ASYNCBOOK_BROKER_URL" in answer["broker"]["problem"]
    assert answer["queues"] == []
    assert answer["asyncbook"]["queue"] == "asyncbook"
    assert answer["asyncbook"]["ready"] is None
    assert answer["asyncbook"]["health"]["ok"] is True
    assert page.status_code == 200
    assert '<a href="/queues" aria-current="page">' in page.text


def test_a_broker_that_does_not_answer_is_said_not_an_error() -> None:
    down = RedisBroker("redis://:secret@127.0.0.1:1/0", timeout=0.5)
    with running_server(broker=down) as server, httpx.Client(base_url=server.url) as client:
        response = client.get("/api/queues")
    assert response.status_code == 200
    broker = response.json()["broker"]
    assert broker["url"] == "redis://:***@127.0.0.1:1/0"
    assert broker["problem"].startswith("cannot read the broker")


@pytest.mark.skipif(not amqp_answers(), reason="no RabbitMQ at ASYNCBOOK_TEST_AMQP_URL")
def test_an_amqp_broker_the_queues_named() -> None:
    with (
        amqp_queue() as name,
        running_server(broker=AmqpBroker(AMQP_URL)) as server,
        httpx.Client(base_url=server.url) as client,
    ):
        answer = client.get("/api/queues", params={"queue": name}).json()
    row = _queues(answer)[name]
    assert (row["ready"], row["consumers"], row["unacked"], row["priorities"]) == (2, 1, None, {})
    assert row["oldestNote"] == "AMQP lets no message be looked at without taking it"
    assert answer["broker"]["kind"] == "amqp"
    assert answer["discoveryComplete"] is False
    assert answer["unacked"] == {"total": None, "exact": False, "unattributed": 0}


def test_many_requests_share_one_read_a_second(
    client: httpx.Client, broker: RedisBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[int] = []
    real = broker.snapshot

    def counted(*args: Any, **kwargs: Any) -> Any:
        reads.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(broker, "snapshot", counted)
    monkeypatch.setattr(web_queues, "REUSE_SECONDS", 60.0)  # however slow the machine
    for _ in range(5):
        assert client.get("/api/queues").status_code == 200
    assert len(reads) == 1
    client.get("/api/queues", params={"limit": "5"})  # another question: another read
    assert len(reads) == 2
    monkeypatch.setattr(web_queues, "REUSE_SECONDS", 0.0)
    client.get("/api/queues")
    assert len(reads) == 3


def test_the_route_is_documented(client: httpx.Client) -> None:
    document = client.get("/openapi.json").json()
    operation = document["paths"]["/api/queues"]["get"]
    assert {p["name"] for p in operation["parameters"]} == {"queue", "limit"}
    assert set(operation["responses"]) >= {"200", "400"}
    schema = document["components"]["schemas"]["QueuesReport"]
    assert {"broker", "queues", "unacked", "asyncbook", "truncated"} <= set(schema["properties"])


def test_the_queues_need_the_token_and_a_book_that_keeps_info() -> None:
    token = "q" * 24
    with (
        running_server(token=token) as server,
        httpx.Client(base_url=server.url, timeout=10) as client,
    ):
        assert client.get("/api/queues").status_code == 401
        good = {"Authorization": "Bearer " + token}
        assert client.get("/api/queues", headers=good).status_code == 200
        page = client.get("/queues")
        assert page.status_code == 303
        assert page.headers["location"].startswith("/login")
    with (
        BackgroundServer(MemoryBook()) as memory,
        httpx.Client(base_url=memory.url.rstrip("/"), timeout=10) as client,
    ):
        assert client.get("/api/queues").status_code == 404
        assert client.get("/queues").status_code == 404
