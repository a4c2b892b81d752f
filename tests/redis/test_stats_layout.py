"""What the per-minute stats and the per-name totals cost a lifecycle in Redis commands
(issue 18: one HINCRBY per stats hash and event), and that fields written by the earlier
layout (a code and a runtime bucket in fields of their own) still read and add up."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import fakeredis
import pytest
import redis

from asyncbook import PublishInfo, RedisBook

from ..support.books import delete_namespace, redis_client
from ..support.servers import free_port, redis_server, wait_until

HOUR = 3_600_000
T0 = 1_699_999_200_000  # a whole hour (in 2023), in ms
INFO = PublishInfo(name="gen", queue="q")


@pytest.fixture(scope="module")
def private(tmp_path_factory: pytest.TempPathFactory) -> Iterator[redis.Redis]:
    """A redis-server of this module's own: its INFO commandstats counts nothing else."""
    port = free_port()
    with redis_server(tmp_path_factory.mktemp("stats-commands"), "--port", str(port)):
        client = redis.Redis(port=port)
        wait_until(client.ping)
        yield client
        client.close()


def calls(client: redis.Redis) -> dict[str, int]:
    info: dict[str, Any] = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(stat["calls"]) for name, stat in info.items()}


def test_a_named_lifecycle_writes_each_stats_hash_once_per_event(private: redis.Redis) -> None:
    book = RedisBook(private, namespace="stats-commands")
    ok = {"type": "succeed", "resultRef": "r", "resultHash": "h"}
    for n in range(2):  # the first warms the scripts up and makes the minutes' fields
        task_id = f"t{n}"
        book.create(id=task_id, now_ms=T0, ttl_ms=HOUR, max_attempts=1, info=INFO)
        before = calls(private)
        book.apply(task_id, {"type": "start", "atMs": T0 + 10, "worker": "w1"})
        book.apply(task_id, {**ok, "atMs": T0 + 1_510})
        book.catch_up_index()  # the stats are the indexer's: its share counts too
        after = calls(private)
    increments = after.get("hincrby", 0) - before.get("hincrby", 0)
    # Each apply: the book's answer counter; the indexer: the worker's counts and the
    # stats. The stats: at the
    # start the minute of every name, of the name and the name's total; at the end the
    # minute ('<minute>:r<bucket>') of every name and of the name, the name's
    # total ('gen|succeeded:<bucket>') and its runtime sum. 2 + 2 + 3 + 4: the earlier
    # layout wrote the code and the runtime bucket apart, 3 more (14).
    assert increments == 11
    gen = book.name_totals()[0]
    assert (gen.started, gen.succeeded, gen.runtime_sum_ms) == (2, 2, 3_000)
    assert gen.runtime_buckets[4] == 2  # 1.5 s: the 2.5 s bucket
    stats = book.stats("gen", window_ms=HOUR, now_ms=T0 + 60_000)
    assert stats.totals["succeeded"] == 2
    assert stats.runtime_buckets[4] == 2


@pytest.fixture(params=["redis", "fakeredis"])
def book(request: pytest.FixtureRequest, namespace: str) -> Iterator[RedisBook]:
    client: Any = redis_client() if request.param == "redis" else fakeredis.FakeRedis()
    yield RedisBook(client, namespace=namespace)
    delete_namespace(client, namespace)
    client.close()


def test_fields_of_the_earlier_layout_read_and_add_up(book: RedisBook) -> None:
    # Before the upgrade, minute 0 counted 2 succeeded with runtimes in buckets 0 and 4
    # and a start, in fields of their own; the totals likewise, with a runtime sum.
    client: Any = book.engine.slot_client()
    hour = T0 // HOUR
    for key in (book.keys.stats(hour, None), book.keys.stats(hour, "gen")):
        client.hset(key, mapping={"0:S": 1, "0:succeeded": 2, "0:b0": 1, "0:b4": 1})
    old = {"gen|S": 1, "gen|succeeded": 2, "gen|b0": 1, "gen|b4": 1, "gen|sum": 1_550}
    client.hset(book.keys.name_totals, mapping=old)
    # After it, in the same minute: one more succeeded run of 1.5 s (bucket 4) and a
    # failed one of 20 ms (bucket 0).
    for task_id, end in (
        ("ok", {"type": "succeed", "resultRef": "r", "resultHash": "h"}),
        ("no", {"type": "fail", "error": "boom", "retryable": False}),
    ):
        book.create(id=task_id, now_ms=T0, ttl_ms=HOUR, max_attempts=1, info=INFO)
        book.apply(task_id, {"type": "start", "atMs": T0 + 10, "worker": "w1"})
        runtime = 1_500 if task_id == "ok" else 20
        book.apply(task_id, {**end, "atMs": T0 + 10 + runtime})
    for name in ("gen", None):
        stats = book.stats(name, window_ms=HOUR, now_ms=T0 + 30 * 60_000)
        assert stats.totals["started"] == 3
        assert (stats.totals["succeeded"], stats.totals["failed"]) == (3, 1)
        assert (stats.runtime_buckets[0], stats.runtime_buckets[4]) == (2, 2)
        assert sum(stats.runtime_buckets) == 4
        (minute,) = [minute for minute in stats.minutes if minute.minute_ms == T0]
        assert (minute.started, minute.succeeded, minute.failed) == (3, 3, 1)
        assert minute.runtime_buckets == stats.runtime_buckets
        assert stats.failure_rate == pytest.approx(1 / 4)
    (gen,) = book.name_totals()
    assert (gen.started, gen.succeeded, gen.failed) == (3, 3, 1)  # counters never go back
    assert (gen.runtime_buckets[0], gen.runtime_buckets[4]) == (2, 2)
    assert sum(gen.runtime_buckets) == 4
    assert gen.runtime_sum_ms == 1_550 + 1_500 + 20
    fields = {field.decode() for field in client.hkeys(book.keys.name_totals)}
    assert fields == set(old) | {"gen|succeeded:4", "gen|failed:0"}


def test_an_end_without_a_runtime_counts_its_code_alone(book: RedisBook) -> None:
    book.create(id="x", now_ms=T0, ttl_ms=60_000, max_attempts=1, info=INFO)
    book.apply("x", {"type": "expire", "atMs": T0 + 60_000})
    book.catch_up_index()  # the stats are the indexer's
    client: Any = book.engine.slot_client()
    fields = {field.decode() for field in client.hkeys(book.keys.name_totals)}
    assert fields == {"gen|expired"}
    stats = book.stats("gen", window_ms=HOUR, now_ms=T0 + 30 * 60_000)
    assert stats.totals["expired"] == 1
    assert sum(stats.runtime_buckets) == 0


def test_succeeded_and_failed_runs_of_a_bucket_share_a_minute_field(book: RedisBook) -> None:
    for n in range(5):
        task_id = f"t{n}"
        book.create(id=task_id, now_ms=T0, ttl_ms=HOUR, max_attempts=1, info=INFO)
        book.apply(task_id, {"type": "start", "atMs": T0 + 10, "worker": "w1"})
        end: dict[str, Any] = {"type": "succeed", "resultRef": "r", "resultHash": "h"}
        if n >= 3:
            end = {"type": "fail", "error": "boom", "retryable": False}
        book.apply(task_id, {**end, "atMs": T0 + 1_510})  # 1.5 s: bucket 4
    book.catch_up_index()  # the stats are the indexer's
    client: Any = book.engine.slot_client()
    minute = client.hgetall(book.keys.stats(T0 // HOUR, "gen"))
    assert minute == {b"0:S": b"5", b"0:r4": str(3 + 2 * 2**31).encode()}
    stats = book.stats("gen", window_ms=HOUR, now_ms=T0 + 30 * 60_000)
    (first,) = [entry for entry in stats.minutes if entry.minute_ms == T0]
    assert (first.started, first.succeeded, first.failed) == (5, 3, 2)
    assert first.runtime_buckets[4] == 5
    assert sum(first.runtime_buckets) == 5
    assert stats.failure_rate == pytest.approx(2 / 5)
    (gen,) = book.name_totals()
    assert (gen.succeeded, gen.failed, gen.runtime_buckets[4]) == (3, 2, 5)
