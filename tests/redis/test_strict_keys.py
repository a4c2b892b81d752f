"""Every key a script touches arrives in KEYS, in as many round trips as before.

The autouse ``strict_keys`` fixture (conftest) runs every script of every test strict;
these tests show the guard is live, and count the round trips the info block costs.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis
from redis.connection import Connection

from asyncbook import PublishInfo, RedisBook
from asyncbook.redis._facts import FactBook, TaskFacts
from asyncbook.redis._keys import KeySchema

pytestmark = pytest.mark.redis

T0 = 1_800_000_000_000
HOUR = 3_600_000
NAMED = PublishInfo(name="resize", parent_id="parent")


class RoundTrips:
    """Counts what the tests' clients send: one packed send is one round trip."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        send: Any = Connection.send_packed_command

        def counted(connection: Connection, command: Any, check_health: bool = True) -> None:
            self.count += 1
            send(connection, command, check_health)

        monkeypatch.setattr(Connection, "send_packed_command", counted)

    def of(self, call: Any) -> int:
        before = self.count
        call()
        return self.count - before


@pytest.fixture
def trips(monkeypatch: pytest.MonkeyPatch) -> RoundTrips:
    return RoundTrips(monkeypatch)


def _warm(book: RedisBook) -> None:
    """The server check and apply.lua's first EVAL (after NOSCRIPT) are behind us."""
    book.create(id="warm", now_ms=T0, ttl_ms=HOUR, max_attempts=1)
    book.apply("warm", _start(T0))


def _start(at: int, worker: str = "w1") -> dict[str, Any]:
    return {"type": "start", "atMs": at, "worker": worker}


def test_the_guard_refuses_a_key_outside_keys(client: redis.Redis, namespace: str) -> None:
    book = RedisBook(client, namespace=namespace)
    sneaky = book.events_script("return redis.call('GET', 'not-in-keys')")
    book.create(id="t", now_ms=T0, ttl_ms=HOUR, max_attempts=1)
    with pytest.raises(redis.ResponseError, match="strict keys: GET touched not-in-keys"):
        book.apply_in_script("t", [], sneaky, "{" + namespace + "}:k", [])


def test_a_task_this_book_created_costs_one_round_trip_per_event(
    client: redis.Redis, namespace: str, trips: RoundTrips
) -> None:
    book = RedisBook(client, namespace=namespace)
    _warm(book)
    book.create(id="t", now_ms=T0, ttl_ms=HOUR, max_attempts=1, info=NAMED)
    assert trips.of(lambda: book.apply("t", _start(T0 + 1))) == 1
    assert (
        trips.of(
            lambda: book.apply(
                "t", {"type": "progress", "atMs": T0 + 2, "progress": 5, "cursor": "c"}
            )
        )
        == 1
    )
    done = {"type": "succeed", "atMs": T0 + HOUR // 2, "resultRef": "r", "resultHash": "h"}
    assert trips.of(lambda: book.apply("t", done)) == 1


def test_a_named_task_another_book_created_costs_one_more_round_trip_once(
    client: redis.Redis, namespace: str, trips: RoundTrips
) -> None:
    RedisBook(client, namespace=namespace).create(
        id="t", now_ms=T0, ttl_ms=HOUR, max_attempts=2, info=NAMED, group_id="g"
    )
    book = RedisBook(client, namespace=namespace)
    _warm(book)
    # The script answers '!facts' (writing nothing), and the call goes again with them.
    assert trips.of(lambda: book.apply("t", _start(T0 + 1))) == 2
    fail = {"type": "fail", "atMs": T0 + 2, "error": "boom", "retryable": True}
    assert trips.of(lambda: book.apply("t", fail)) == 1
    assert trips.of(lambda: book.apply("t", _start(T0 + 3, "w2"))) == 1
    task = book.get("t")
    assert task is not None
    assert (task.state, task.attempts) == ("running", 2)


def test_a_worker_that_names_the_task_costs_one_round_trip(
    client: redis.Redis, namespace: str, trips: RoundTrips
) -> None:
    RedisBook(client, namespace=namespace).create(
        id="t", now_ms=T0, ttl_ms=HOUR, max_attempts=1, info=NAMED
    )
    book = RedisBook(client, namespace=namespace)
    _warm(book)
    script = book.events_script(
        "local answers, missing = apply_events(KEYS, ARGV, 1)\n"
        "return missing or (answers and {'done', '', answers}) or {'!unknown'}"
    )
    book.apply_in_script("warm", [], script, "{" + namespace + "}:extra", [])
    done = {"type": "succeed", "atMs": T0 + 5, "resultRef": "r", "resultHash": "h"}
    events = [(_start(T0 + 1), "c1"), (done, "c2")]
    key = "{" + namespace + "}:extra"
    answer = trips.of(lambda: book.apply_in_script("t", events, script, key, [], name="resize"))
    assert answer == 1
    task = book.get("t")
    assert task is not None
    assert task.state == "succeeded"


def test_a_book_remembers_the_facts_of_its_latest_tasks_only() -> None:
    facts = FactBook(KeySchema("ns"), lambda: 0.0)
    for n in range(10_001):
        facts.learn(f"t{n}", TaskFacts(name="n"))
    assert facts.get("t0") is None
    assert facts.get("t1") == TaskFacts(name="n")
    assert facts.get("t10000") == TaskFacts(name="n")
