"""RedisBook's batched calls: events applied inside a caller's script (``apply_in_script``)
answer and store exactly what ``apply`` does; ``create_many`` is ``create`` in one round
trip. Real Redis and fakeredis."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import fakeredis
import pytest

from asyncbook import (
    AsyncBookError,
    CreateSpec,
    EventInput,
    PublishInfo,
    RedisBook,
    UnknownTaskError,
)
from asyncbook.redis import EventOutcome

from ..support.books import delete_namespace, redis_client
from ..support.events import expire, fail, progress, start, succeed

# The smallest caller: the events, then the task's state and the caller's ARGV[1] echoed.
ECHO = """
local answers = apply_events(KEYS, ARGV, 2)
if not answers then
  return {'!unknown'}
end
return {ARGV[1], redis.call('HGET', KEYS[1], 'st') or '', answers}
"""


@pytest.fixture(params=["redis", "fakeredis"])
def client(request: pytest.FixtureRequest) -> Iterator[Any]:
    real: Any = (
        redis_client()
        if request.param == "redis"
        else fakeredis.FakeRedis(server=fakeredis.FakeServer())
    )
    yield real
    real.close()


@pytest.fixture
def books(client: Any, namespace: str) -> Iterator[tuple[RedisBook, RedisBook]]:
    """Two books on one server: one applies with ``apply``, the other in a script."""
    yield RedisBook(client, namespace=namespace), RedisBook(client, namespace=namespace + "-s")
    delete_namespace(client, namespace)
    delete_namespace(client, namespace + "-s")


# (max attempts, heartbeat timeout, group, events applied before): the task the events meet.
TASKS: dict[str, tuple[int, int | None, str | None, list[tuple[EventInput, str | None]]]] = {
    "queued": (2, None, None, []),
    "with a heartbeat timeout": (2, 30_000, None, []),
    "in a group": (2, None, "g", []),
    "requeued once": (3, 30_000, None, [(start(), "s0"), (fail(retryable=True), "f0")]),
    "on its last attempt": (1, None, None, []),
}

SEQUENCES: dict[str, list[tuple[EventInput, str | None]]] = {
    # An execution's start and end: applied together when they can be.
    "start, succeed": [(start(), "s"), (succeed(), "e")],
    "start, fail": [(start(), "s"), (fail(error="no luck"), "f")],
    "start, fail retryable": [(start(), "s"), (fail(retryable=True), "f")],
    "start, succeed late": [(start(), "s"), (succeed(at=10_000), "e")],
    "start late, succeed": [(start(at=10_000), "s"), (succeed(), "e")],
    "start, succeed, a callback seen": [(start(), "s0"), (succeed(), "e")],
    "start, succeed without callbacks": [(start(), None), (succeed(), None)],
    "start, an empty ref": [(start(), "s"), (succeed(ref=" "), "e")],
    "start, expire": [(start(), "s"), (expire(), "x")],
    "progress, succeed": [(progress(10), "p"), (succeed(), "e")],
    "start, progress, succeed": [(start(), "s"), (progress(40), "p"), (succeed(), "e")],
    "a redelivered start": [(start(), "s"), (start(), "s"), (succeed(), "e")],
    "fail retryable, start again": [(start(), "s1"), (fail(retryable=True), "f"), (start(), "s2")],
    "after the deadline": [(start(), "s"), (succeed(at=10_000), "e")],
    "progress backwards": [(start(), "s"), (progress(60), None), (progress(30), None)],
    "an invalid progress": [(start(), "s"), (progress(101), "p"), (succeed(), "e")],
    "ended twice": [(start(), "s"), (fail(), "f"), (succeed(), "e"), (expire(), None)],
    "a wire-format event": [({"type": "start", "atMs": 1, "worker": "w"}, "s")],
    "start, a failure with its traceback": [
        (start(), "s"),
        (
            {
                "type": "fail",
                "atMs": 3,
                "error": "e",
                "retryable": False,
                "exception": "KeyError",
                "traceback": "tb",
            },
            "f",
        ),
    ],
}


@dataclass(frozen=True)
class Seconds:
    """A TTL as ``TTL`` answers it, equal to one a second apart: the two books write their
    keys a few ms apart, and a whole second may tick between them."""

    ttl: int

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Seconds):
            return NotImplemented
        if min(self.ttl, other.ttl) < 0:  # -1 (no expiry) and -2 (no key) are exact
            return self.ttl == other.ttl
        return abs(self.ttl - other.ttl) <= 1

    def __hash__(self) -> int:
        return 0


def raw_state(client: Any, book: RedisBook) -> dict[str, Any]:
    """Everything the book keeps about task "t", read straight from Redis (its indexes
    once caught up)."""
    book.catch_up_index()
    k = book.keys
    state: dict[str, Any] = {
        "hash": client.hgetall(k.task("t")),
        "history": client.lrange(k.history("t"), 0, -1),
        "ttl": (Seconds(client.ttl(k.task("t"))), Seconds(client.ttl(k.history("t")))),
        "markers": {
            cb: Seconds(client.ttl(k.callback(cb))) for cb in ("s", "s0", "e", "f", "f0", "p", "x")
        },
        "deadline": client.zscore(k.deadlines, "t"),
        "stalled": client.zscore(k.stalls, "t") is not None,
        "indexes": [client.zscore(index, "t") for index in k.state_indexes],
    }
    state["group"] = client.hgetall(k.group("g"))
    # The console's info: the companion hash, the name's, the worker's and the stats' keys.
    state["info"] = client.hgetall(k.info("t")), Seconds(client.ttl(k.info("t")))
    state["by name"] = [client.zscore(index, "t") for index in k.name_indexes("gen")]
    state["worker"] = (
        client.zscore(k.worker_tasks("w1"), "t"),
        client.hgetall(k.worker_counts("w1")),
    )
    state["workers"] = client.zrange(k.workers, 0, -1, withscores=True)
    state["stats"] = client.hgetall(k.stats(0, None)), client.hgetall(k.stats(0, "gen"))
    state["totals"] = client.hgetall(k.name_totals)
    # Key names inside values (a member's group key) differ by the books' namespaces only.
    normal: dict[str, Any] = unify(state, k.tag.encode())
    return normal


def unify(value: Any, tag: bytes) -> Any:
    """``value`` with the book's hash tag in its byte strings replaced by one name."""
    if isinstance(value, bytes):
        return value.replace(tag, b"{NS}")
    if isinstance(value, dict):
        return {unify(key, tag): unify(item, tag) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [unify(item, tag) for item in value]
    return value


@pytest.mark.parametrize("task", sorted(TASKS))
@pytest.mark.parametrize("name", sorted(SEQUENCES))
def test_events_in_a_script_answer_and_store_what_apply_does(
    client: Any, books: tuple[RedisBook, RedisBook], name: str, task: str
) -> None:
    one_by_one, scripted = books
    events = SEQUENCES[name]
    max_attempts, heartbeat, group, before = TASKS[task]
    for book in books:
        book.create(
            id="t",
            now_ms=0,
            ttl_ms=5_000,
            max_attempts=max_attempts,
            heartbeat_timeout_ms=heartbeat,
            group_id=group,
            info=PublishInfo(name="gen", args="(1,)", queue="q"),
        )
        for event, callback in before:
            book.apply("t", event, callback)
    expected: list[Any] = []
    for event, callback in events:
        try:
            expected.append(one_by_one.apply("t", event, callback))
        except AsyncBookError as error:
            expected.append(error)
    script = scripted.events_script(ECHO)
    answer = scripted.apply_in_script("t", events, script, "unused", ["echo"])
    assert answer.status == "echo"
    for want, got in zip(expected, answer.outcomes, strict=True):
        if isinstance(want, AsyncBookError):
            assert type(got) is type(want)
            assert str(got) == str(want)
            continue
        assert isinstance(got, EventOutcome)
        assert got == EventOutcome(
            reason=want.reason.value,
            changed=want.changed,
            duplicate=want.duplicate,
            notify=want.notify,
            duplicate_callback=want.duplicate_callback,
            state=want.task.state.value,
            error=want.task.error,
        )
    stored, same = one_by_one.get("t"), scripted.get("t")
    assert stored is not None
    assert same == stored
    assert answer.state == stored.state.value
    assert scripted.transition_counts() == one_by_one.transition_counts()
    assert scripted.drain_notifications() == one_by_one.drain_notifications()
    if not isinstance(client, fakeredis.FakeRedis):  # TTLs in whole seconds, on the real clock
        assert raw_state(client, scripted) == raw_state(client, one_by_one)


def test_a_sharded_book_runs_the_events_in_the_tasks_shard(client: Any, namespace: str) -> None:
    """On four shards, every sequence's events in a script answer and store what
    ``apply`` does on one shard."""
    for name, events in sorted(SEQUENCES.items()):
        one_by_one = RedisBook(client, namespace=f"{namespace}-{name}")
        scripted = RedisBook(client, namespace=f"{namespace}-{name}-s", shards=4)
        try:
            for book in (one_by_one, scripted):
                book.create(id="t", now_ms=0, ttl_ms=5_000, max_attempts=2, group_id="g")
            expected: list[Any] = []
            for event, callback in events:
                try:
                    expected.append(one_by_one.apply("t", event, callback).reason.value)
                except AsyncBookError as error:
                    expected.append(type(error))
            script = scripted.events_script(ECHO)
            answer = scripted.apply_in_script("t", events, script, "unused", ["echo"])
            got = [
                each.reason if isinstance(each, EventOutcome) else type(each)
                for each in answer.outcomes
            ]
            assert got == expected, name
            assert scripted.get("t") == one_by_one.get("t")
            assert scripted.group("g") == one_by_one.group("g")
        finally:
            delete_namespace(client, one_by_one.namespace)
            delete_namespace(client, scripted.namespace)


def test_events_of_an_unknown_task_write_nothing(books: tuple[RedisBook, RedisBook]) -> None:
    _, book = books
    script = book.events_script(ECHO)
    with pytest.raises(UnknownTaskError):
        book.apply_in_script("ghost", [(start(), "s")], script, "unused", ["x"])
    assert book.get("ghost") is None
    # Without events the caller's script runs alone.
    answer = book.apply_in_script("ghost", [], script, "unused", ["alone"])
    assert (answer.status, answer.state, answer.outcomes) == ("alone", "", [])


def test_a_flushed_script_is_sent_again(client: Any, books: tuple[RedisBook, RedisBook]) -> None:
    _, book = books
    book.create(id="t", now_ms=0, ttl_ms=5_000, max_attempts=1)
    script = book.events_script(ECHO)
    client.script_flush()
    answer = book.apply_in_script("t", [(start(), "s")], script, "unused", ["again"])
    assert answer.status == "again"
    assert answer.state == "running"


def test_create_many_is_create_in_one_round_trip(
    client: Any, books: tuple[RedisBook, RedisBook]
) -> None:
    book, other = books
    book.create(id="taken", now_ms=0, ttl_ms=100, max_attempts=1)
    client.script_flush()  # the batch meets NOSCRIPT and is sent again with the source
    results = book.create_many(
        [
            CreateSpec("a", 10, 1_000, 3),
            CreateSpec("taken", 10, 1_000, 3, exist_ok=True),
            CreateSpec("taken", 10, 1_000, 3),
            CreateSpec("bad-ttl", 10, -1, 3),
            CreateSpec("g1", 10, 1_000, 1, exist_ok=True, heartbeat_timeout_ms=500, group_id="g"),
        ]
    )
    first, existing, conflict, bad, member = results
    assert first == book.get("a")
    assert existing == book.get("taken")
    assert existing.expires_at_ms == 100  # the stored task, untouched
    assert isinstance(conflict, AsyncBookError)
    assert conflict.code == "conflict"
    assert isinstance(bad, AsyncBookError)
    assert bad.field == "ttlMs"
    assert book.get("bad-ttl") is None
    assert member == book.get("g1")
    summary = book.group("g")
    assert summary is not None
    assert summary.members == 1
    # The same specs one by one give the same tasks.
    other.create(id="a", now_ms=10, ttl_ms=1_000, max_attempts=3)
    assert other.get("a") == first
    assert book.create_many([]) == []


def test_a_create_sender_writes_now_and_reads_later(
    client: Any, books: tuple[RedisBook, RedisBook], caplog: pytest.LogCaptureFixture
) -> None:
    book, _ = books
    other_view = RedisBook(client, namespace=book.namespace)  # no sender of its own
    sender = book.create_sender()
    assert sender is not None  # one shard: its creates are pipelined
    client.script_flush()  # the first answers are NOSCRIPT: those creates go again by EVAL
    for n in range(70):  # past the batch after which send reads what has arrived
        sender.send(CreateSpec(f"t{n}", 0, 1_000, 1, exist_ok=True))
    sender.send(CreateSpec("t0", 0, 1_000, 1))  # not exist_ok: refused, logged
    with pytest.raises(AsyncBookError):
        sender.send(CreateSpec("bad", 0, -5, 1))  # refused before anything is written
    sender.collect()
    assert not sender.pending()
    assert all(other_view.get(f"t{n}") is not None for n in range(70))
    assert "task t0 could not be created" in caplog.text
    assert sender.take_unanswered() == []
    sender.close()


def test_a_create_sender_hands_back_what_a_lost_connection_left_unanswered(
    books: tuple[RedisBook, RedisBook],
) -> None:
    book, _ = books
    sender = book.create_sender()
    assert sender is not None  # one shard: its creates are pipelined
    sender.send(CreateSpec("a", 0, 1_000, 1, exist_ok=True))
    connection: Any = sender._pipe.connection()
    connection.disconnect()  # as if Redis went away before the answer was read
    sender.collect()
    assert sender.take_unanswered() == [CreateSpec("a", 0, 1_000, 1, exist_ok=True)]
    assert not sender.pending()
    sender.send(CreateSpec("b", 0, 1_000, 1, exist_ok=True))  # a new connection
    sender.collect()
    assert book.get("b") is not None
    sender.close()
