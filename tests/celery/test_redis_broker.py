"""``RedisBroker``: a Celery broker on Redis read as kombu lays it out, on a real app's
queues with a real worker holding unacked messages; bounded, one pipeline for the queues."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from asyncbook import RedisBook
from asyncbook._queues import BrokerUnreadableError
from asyncbook.celery import _redis_broker as _broker
from asyncbook.celery._redis_broker import RedisBroker, sub_queue

from ..support.broker import (
    CONSUMED_SENT,
    PREFETCHED,
    BusyBroker,
    busy_broker,
    remove_queue,
)
from ..support.celery import CELERY_URL, unique


@pytest.fixture
def busy(book: RedisBook) -> Iterator[BusyBroker]:
    with busy_broker(book) as running:
        yield running


@pytest.fixture
def broker() -> Iterator[RedisBroker]:
    reader = RedisBroker(CELERY_URL)
    yield reader
    reader.close()


def test_counts_ready_per_priority_and_unacked_per_queue(
    busy: BusyBroker, broker: RedisBroker
) -> None:
    snapshot = broker.snapshot(own_queue=busy.own)
    queues = {queue.name: queue for queue in snapshot.queues}
    consumed, prioritized = queues[busy.consumed], queues[busy.prioritized]
    assert (consumed.ready, consumed.unacked) == (CONSUMED_SENT - PREFETCHED, PREFETCHED)
    assert consumed.priorities == {"0": CONSUMED_SENT - PREFETCHED, "3": 0, "6": 0, "9": 0}
    # Priority 5 lands in kombu's step 3; 9 twice in step 9.
    assert (prioritized.ready, prioritized.unacked) == (4, 0)
    assert prioritized.priorities == {"0": 1, "3": 1, "6": 0, "9": 2}
    assert snapshot.unacked_exact
    assert snapshot.unacked_total is not None
    assert snapshot.unacked_total >= PREFETCHED
    # asyncbook's own queue is listed even when nothing was ever sent to it.
    assert queues[busy.own].ready == 0
    assert queues[busy.own].oldest == ()
    assert consumed.consumers is None  # Redis does not say


def test_the_oldest_message_of_each_sub_queue(busy: BusyBroker, broker: RedisBroker) -> None:
    snapshot = broker.snapshot(own_queue=busy.own)
    queues = {queue.name: queue for queue in snapshot.queues}
    # The worker took the first two sent; the oldest still waiting is the third.
    assert [m.task_id for m in queues[busy.consumed].oldest] == [busy.consumed_ids[PREFETCHED]]
    assert [m.task_name for m in queues[busy.consumed].oldest] == ["queues.wait"]
    # One oldest per non-empty sub-queue: steps 0, 3 and 9 (the first 9 sent).
    ids = busy.prioritized_ids
    assert [m.task_id for m in queues[busy.prioritized].oldest] == [ids[0], ids[1], ids[2]]


def test_the_queues_are_read_in_one_pipeline(
    busy: BusyBroker, broker: RedisBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    executed: list[int] = []
    real = redis.client.Pipeline.execute

    def counted(pipe: Any, raise_on_error: bool = True) -> Any:
        if pipe.connection_pool is broker.client.connection_pool:  # not the worker's
            executed.append(len(pipe.command_stack))
        return real(pipe, raise_on_error)

    monkeypatch.setattr(redis.client.Pipeline, "execute", counted)
    named = [unique("named") for _ in range(30)]
    snapshot = broker.snapshot(named, own_queue=busy.own)
    # The binding sets' pipeline, then one for every queue's lists and the unacked hash.
    assert len(executed) == 2
    assert executed[1] == len(snapshot.queues) * 8 + 2
    assert {busy.consumed, busy.prioritized, busy.own, *named} <= {q.name for q in snapshot.queues}


def test_at_most_limit_queues_named_ones_first(busy: BusyBroker, broker: RedisBroker) -> None:
    snapshot = broker.snapshot([busy.prioritized], own_queue=busy.own, limit=2)
    assert [queue.name for queue in snapshot.queues] == sorted([busy.own, busy.prioritized])
    assert snapshot.truncated


def test_celery_plumbing_and_foreign_values_are_told_apart(broker: RedisBroker) -> None:
    client = broker.client
    odd, plain = unique("odd"), unique("plain")
    control = f"\x06\x16\x06\x16{unique('w')}.celery.pidbox"
    client.sadd("_kombu.binding.celery.pidbox", control)
    client.sadd(f"_kombu.binding.{plain}", f"{plain}\x06\x16\x06\x16{plain}")
    client.lpush(plain, b"not json")
    client.set(odd, "a string, not a list")
    try:
        snapshot = broker.snapshot([odd])
        queues = {queue.name: queue for queue in snapshot.queues}
        assert not any(name.endswith(".celery.pidbox") for name in queues)
        assert queues[plain].ready == 1
        assert queues[plain].oldest[0].note == "not a kombu message (not JSON)"
        assert queues[odd].ready == 0  # a key of another type counts as empty
    finally:
        remove_queue(client, plain)
        client.delete(odd)
        client.srem("_kombu.binding.celery.pidbox", control)


def test_the_scan_for_queues_stops_at_its_cap_and_says_so(
    busy: BusyBroker, broker: RedisBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert broker.snapshot(own_queue=busy.own).discovery_complete
    scans: list[int] = []
    real = broker.client.scan

    def counted(*args: Any, **kwargs: Any) -> Any:
        scans.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(broker.client, "scan", counted)
    monkeypatch.setattr(_broker, "SCAN_COUNT", 1)
    monkeypatch.setattr(_broker, "MAX_SCANS", 2)
    snapshot = broker.snapshot([busy.consumed], own_queue=busy.own)
    assert len(scans) == 2
    assert not snapshot.discovery_complete
    # The queues named are read all the same.
    assert {queue.name: queue.ready for queue in snapshot.queues}[busy.consumed] == 3


def test_unacked_entries_not_kombus_are_unattributed(broker: RedisBroker) -> None:
    client = broker.client
    tags = {unique("tag"): value for value in (b"not json", b'[{}, ["x"], "rk"]', b'{"a": 1}')}
    for tag, value in tags.items():
        client.hset("unacked", tag, value)
    try:
        snapshot = broker.snapshot()
    finally:
        client.hdel("unacked", *tags)
    assert snapshot.unacked_exact  # (a broker holding fewer than 1,000 unacked messages)
    assert snapshot.unacked_unattributed >= len(tags)


def test_a_broker_that_does_not_answer_is_unreadable() -> None:
    reader = RedisBroker("redis://127.0.0.1:1/0", timeout=0.5)
    with pytest.raises(BrokerUnreadableError, match="cannot read the broker"):
        reader.snapshot()


def test_priority_sub_queue_names_are_kombus() -> None:
    assert sub_queue("celery", 0) == "celery"
    assert sub_queue("celery", 3) == "celery\x06\x163"
