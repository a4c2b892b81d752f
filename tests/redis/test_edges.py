"""RedisBook at the edges: script flushes mid-batch, eviction, a vanished outbox, clocks."""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
import redis

from asyncbook import (
    ApplyItem,
    CallbackResult,
    DamagedRecordError,
    MemoryBook,
    RedisBook,
    sweep,
)

from ..support.books import delete_namespace, redis_client, scripts_flushed
from ..support.events import expire, progress, start, succeed
from ..support.servers import free_port, redis_server, wait_until

FAR = 10**15


@pytest.mark.long
def test_a_batch_keeps_each_tasks_order_while_scripts_are_flushed(
    client: redis.Redis, namespace: str
) -> None:
    """Scripts are flushed in a loop while three writers (each reloading the script when
    it is gone, as every book does) send batches: no success may run before its start."""

    def write(tasks: list[str]) -> None:
        own = redis_client()
        writer = RedisBook(own, namespace=namespace)
        for first in range(0, len(tasks), 50):
            items: list[ApplyItem] = []
            for task_id in tasks[first : first + 50]:
                items += [(task_id, start(), f"{task_id}:s"), (task_id, succeed(), f"{task_id}:d")]
            writer.apply_many(items, full_task=False)
        own.close()

    book = RedisBook(client, namespace=namespace)
    groups = [[f"w{w}-t{n}" for n in range(1000)] for w in range(3)]
    for task_id in (task_id for group in groups for task_id in group):
        book.create(id=task_id, now_ms=0, ttl_ms=FAR, max_attempts=1)
    writers = [threading.Thread(target=write, args=(group,)) for group in groups]
    with scripts_flushed():
        for thread in writers:
            thread.start()
        for thread in writers:
            thread.join()
    try:
        counts = book.count_by_state()
        assert counts["succeeded"] == 3000, counts
    finally:
        delete_namespace(client, namespace)


def _succeeded(book: RedisBook, task_id: str) -> None:
    book.create(id=task_id, now_ms=0, ttl_ms=FAR, max_attempts=1)
    book.apply(task_id, start())
    book.apply(task_id, succeed())


def test_a_damaged_record_is_reported_and_never_fails_its_batch(
    book: RedisBook, client: redis.Redis
) -> None:
    _succeeded(book, "whole")
    _succeeded(book, "torn")
    client.delete(book.keys.history("torn"))  # what eviction of one key does

    for call in (
        lambda: book.get("torn"),
        lambda: book.resume("torn", 0),
        lambda: book.apply("torn", succeed()),
        lambda: book.deliver_result("torn", "key-1", 5),
        lambda: book.create(id="torn", now_ms=0, ttl_ms=10, max_attempts=1, exist_ok=True),
    ):
        with pytest.raises(DamagedRecordError) as caught:
            call()
        assert caught.value.task_id == "torn"
        assert "history holds 0 of 2 entries" in caught.value.message

    whole, torn = book.apply_many([("whole", succeed(), None), ("torn", succeed(), None)])
    assert isinstance(whole, CallbackResult)
    assert whole.reason == "duplicate-result"
    assert isinstance(torn, DamagedRecordError)
    assert [task.id for task in book.list_tasks().tasks] == ["whole"]


def test_a_new_task_does_not_inherit_an_evicted_records_history(
    book: RedisBook, client: redis.Redis
) -> None:
    _succeeded(book, "again")
    client.delete(book.keys.task("again"))  # the hash went, its history stayed
    book.create(id="again", now_ms=0, ttl_ms=FAR, max_attempts=1)
    book.apply("again", start())
    task = book.get("again")
    assert task is not None
    assert [(entry.version, entry.event.type) for entry in task.history] == [(1, "start")]


def test_a_book_warns_when_redis_may_evict_its_keys(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    port = free_port()
    with redis_server(tmp_path, "--port", str(port), "--maxmemory-policy", "allkeys-lru"):
        client = redis.Redis(port=port)
        wait_until(client.ping)
        book = RedisBook(client, namespace="evicting")
        with caplog.at_level(logging.WARNING, "asyncbook.redis"):
            book.create(id="t", now_ms=0, ttl_ms=10, max_attempts=1)
            book.create(id="u", now_ms=0, ttl_ms=10, max_attempts=1)
        warnings = [r for r in caplog.records if "maxmemory-policy" in r.getMessage()]
        assert len(warnings) == 1
        assert "allkeys-lru" in warnings[0].getMessage()
        client.close()


def test_no_warning_under_noeviction(book: RedisBook, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "asyncbook.redis"):
        book.create(id="t", now_ms=0, ttl_ms=10, max_attempts=1)
    assert book.check_eviction_policy() == "noeviction"
    assert "maxmemory-policy" not in caplog.text


def _notify(book: RedisBook, task_id: str) -> None:
    book.create(id=task_id, now_ms=0, ttl_ms=FAR, max_attempts=1)
    book.apply(task_id, {"type": "expire", "atMs": 1})


def test_the_outbox_keeps_what_a_group_has_not_acknowledged(
    client: redis.Redis, namespace: str
) -> None:
    book = RedisBook(client, namespace=namespace, retention=timedelta(milliseconds=50))
    try:
        _notify(book, "read-not-acked")
        read = book.consume_notifications("mailer", "m1")
        assert [note.task_id for _, note in read] == ["read-not-acked"]
        _notify(book, "not-read-yet")
        time.sleep(0.2)  # both are now older than the retention
        _notify(book, "fresh")  # an XADD trims the outbox
        again = book.consume_notifications("mailer", "m2", min_idle_ms=0)
        assert [note.task_id for _, note in again] == ["read-not-acked", "not-read-yet", "fresh"]
        book.ack("mailer", *(entry_id for entry_id, _ in again))
        time.sleep(0.2)
        _notify(book, "later")  # acknowledged and old: now they may go
        assert client.xlen(book.keys.outbox) == 1
    finally:
        delete_namespace(client, namespace)


def test_consuming_survives_a_vanished_outbox(book: RedisBook, client: redis.Redis) -> None:
    _notify(book, "before")
    assert len(book.consume_notifications("mailer", "m1")) == 1
    client.delete(book.keys.outbox)
    _notify(book, "after")
    got = book.consume_notifications("mailer", "m1")
    assert [note.task_id for _, note in got] == ["after"]


def test_the_sweep_goes_by_the_redis_clock(
    book: RedisBook, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweeping host whose clock runs 15 s fast expires nothing early."""
    now = book.now_ms()
    assert abs(now - time.time() * 1000) < 5_000
    for n in range(20):
        book.create(id=f"due-later-{n}", now_ms=now, ttl_ms=5_000, max_attempts=1)
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + 15)
    monkeypatch.setattr(time, "time_ns", lambda: int((real_time() + 15) * 1e9))
    assert sweep(book).expired == 0
    assert book.count_by_state()["queued"] == 20


def test_a_members_changes_name_its_group_on_the_channel(book: RedisBook) -> None:
    from asyncbook.redis import parse_change

    pubsub = book.client.pubsub()
    pubsub.subscribe(book.keys.changes_channel)
    pubsub.get_message(timeout=1)  # the subscription
    book.create(id="m", now_ms=0, ttl_ms=FAR, max_attempts=1, group_id="batch {1}")
    book.create(id="loner", now_ms=0, ttl_ms=FAR, max_attempts=1)
    book.apply("m", start())
    changes = []
    for _ in range(3):
        message = pubsub.get_message(timeout=2)
        assert message is not None
        changes.append(parse_change(message["data"]))
    pubsub.close()
    assert [(c.task_id, c.group_id) for c in changes if c is not None] == [
        ("m", "batch {1}"),
        ("loner", None),
        ("m", "batch {1}"),
    ]


@pytest.mark.parametrize(
    "later",
    [
        pytest.param(("t", progress(50, at=2), None), id="the-same-task"),
        pytest.param(("u", progress(50, at=2), "c1"), id="the-same-callback-id"),
        pytest.param(("u", succeed(2), None), id="the-end-of-the-same-groups-last-member"),
    ],
)
def test_an_end_whose_worker_the_book_no_longer_knows_keeps_its_place_in_a_batch(
    client: redis.Redis, namespace: str, later: ApplyItem
) -> None:
    # Another book started t since this one learned its facts (no worker): t's end was
    # refused for facts and sent again after the batch, behind the event after it (u
    # was started by this book: it knows u's worker).
    mine, other, memory = (
        RedisBook(client, namespace=namespace),
        RedisBook(client, namespace=namespace),
        MemoryBook(),
    )
    batch: list[ApplyItem] = [("t", succeed(1), "c1"), later]
    for each in (mine, memory):
        for task_id in ("t", "u"):
            each.create(id=task_id, now_ms=0, ttl_ms=50, max_attempts=1, group_id="g")
        each.seal_group("g", 2)
    for each in (other, memory):
        each.apply("t", start(0, "w9"))
    for each in (mine, memory):
        each.apply("u", start(0, "w2"))
    answers = [
        [(r.reason, r.task.state) if isinstance(r, CallbackResult) else r for r in results]
        for results in (mine.apply_many(batch), memory.apply_many(batch))
    ]
    assert answers[0] == answers[1]
    assert mine.group("g") == memory.group("g")
    assert mine.drain_group_notifications() == memory.drain_group_notifications()


HOUR = 3_600_000


def test_an_event_refused_for_facts_keeps_its_place_in_a_batch(
    client: redis.Redis, namespace: str
) -> None:
    # Another book created t; this one learned only its worker (t's start, sent alone,
    # needed no more), not its deadline, which lies in another hour than the events: t's
    # expiry was refused for facts and sent again after the batch, behind u's start of
    # the same callback id, which so took it (issue 31).
    mine, other, memory = (
        RedisBook(client, namespace=namespace),
        RedisBook(client, namespace=namespace),
        MemoryBook(),
    )
    for each in (other, memory):
        for task_id in ("t", "u"):
            each.create(id=task_id, now_ms=5 * HOUR - 10, ttl_ms=50, max_attempts=1)
    for each in (mine, memory):
        each.apply("t", start(5 * HOUR - 5, "w1"))
    batch: list[ApplyItem] = [
        ("t", expire(5 * HOUR - 4), "c1"),
        ("u", start(5 * HOUR - 3, "w2"), "c1"),
    ]
    answers = [
        [
            (r.reason, r.changed, r.task.state) if isinstance(r, CallbackResult) else r
            for r in each.apply_many(batch)
        ]
        for each in (mine, memory)
    ]
    assert answers[0] == answers[1]
    assert mine.drain_notifications() == memory.drain_notifications()
