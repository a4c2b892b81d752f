"""The indexer (``_indexer``, index.lua): the console's indexes are built off the write
path from the change stream, and equal a rebuild from the records, also after an indexer
was killed mid-batch and while two indexers ran at once."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from typing import Any

import redis

from asyncbook import CreateSpec, PublishInfo, RedisBook
from asyncbook._console import IndexLag
from asyncbook._models import STATE_NAMES
from asyncbook.redis import _indexer as indexer
from asyncbook.redis._keys import SORT_INDEXED

from ..support.books import REDIS_URL, delete_namespace
from ..support.events import fail, start, succeed

NAMES = ("gen", "talk", "ü x", "")

INDEXER = """
import sys
from asyncbook.redis import RedisBook, _indexer
book = RedisBook.from_url(sys.argv[1], namespace=sys.argv[2])
shard = book.ns.first
print("ready", flush=True)
while True:
    book.engine.run(_indexer.catch_up(shard, 1, 7))
"""
"""An indexer in a process of its own: 7 entries a batch, for ever (until killed)."""


def workload(book: RedisBook, count: int) -> None:
    """``count`` tasks of several names, in every state (starts, ends, a retry)."""
    specs = [
        CreateSpec(f"t{i}", 1_000, 10**12, 2, info=None if not NAMES[i % 4] else _named(i))
        for i in range(count)
    ]
    book.create_many(specs)
    items: list[Any] = []
    for i in range(count):
        kind = i % 6
        if kind == 0:
            continue  # stays queued
        items.append((f"t{i}", start(2_000 + i, worker=f"w{i % 3}"), f"s{i}"))
        if kind == 2:
            items.append((f"t{i}", succeed(3_000 + 2 * i), f"e{i}"))
        elif kind == 3:
            items.append((f"t{i}", fail(4_000 + i, retryable=True), f"f{i}"))
        elif kind == 4:
            items.append((f"t{i}", fail(5_000 + i), f"f{i}"))
    for at in range(0, len(items), 500):
        book.apply_many(items[at : at + 500])
    for i in range(5, count, 6):
        book.cancel(f"t{i}", "no longer wanted", at_ms=6_000 + i, callback_id=f"c{i}")


def _named(i: int) -> PublishInfo:
    return PublishInfo(name=NAMES[i % 4])


def rebuilt(client: Any, book: RedisBook) -> dict[str, Any]:
    """The state, name and sort indexes rebuilt from the task records alone."""
    k = book.keys
    out: dict[str, dict[str, float]] = {}

    def add(key: str, member: str, score: float) -> None:
        out.setdefault(key, {})[member] = score

    for raw in client.scan_iter(match=f"{k.tag}:t:*", count=1000):
        record = {key.decode(): value.decode() for key, value in client.hgetall(raw).items()}
        task_id, seq, st = raw.decode().split(":t:", 1)[1], float(record["seq"]), record["st"]
        add(k.state_index(st), task_id, seq)
        if "n" in record:
            add(k.name_index(st, record["n"]), task_id, seq)
        if "s" in record:
            add(k.sort_index("started"), task_id, float(record["s"]))
            add(k.sort_index("attempts"), task_id, float(record["att"]))
        if "e" in record:
            add(k.sort_index("ended"), task_id, float(record["e"]))
            if st in ("succeeded", "failed"):
                runtime = max(0, math.floor(float(record["e"]) - float(record["s"])))
                add(k.sort_index("runtime"), task_id, runtime)
    return out


def indexes(client: Any, book: RedisBook) -> dict[str, Any]:
    """The state, name and sort indexes as Redis holds them (empty ones left out)."""
    k = book.keys
    keys = [*k.state_indexes, *k.sort_indexes]
    keys += [k.name_index(state, name) for name in NAMES if name for state in STATE_NAMES]
    out = {}
    for key in keys:
        rows = client.zrange(key, 0, -1, withscores=True)
        if rows:
            out[key] = {member.decode(): score for member, score in rows}
    return out


CONSOLE_KEYS = (":idx:", ":n:", ":by:", ":names", ":nt", ":workers", ":w:", ":wc:", ":s:", ":sa:")
"""The keys the indexer keeps (after the namespace's tag)."""


def console_state(client: Any, book: RedisBook) -> dict[str, Any]:
    """Every key the indexer keeps, by its name after the tag: a sorted set's members and
    scores, a hash's fields."""
    tag = book.keys.tag
    out: dict[str, Any] = {}
    for raw in client.scan_iter(match=f"{tag}:*", count=1000):
        key = raw.decode()[len(tag) :]
        if not key.startswith(CONSOLE_KEYS):
            continue
        if client.type(raw) == b"zset":
            out[key] = client.zrange(raw, 0, -1, withscores=True)
        else:
            out[key] = client.hgetall(raw)
    return out


def test_the_indexes_equal_a_rebuild_from_the_records(client: redis.Redis, book: RedisBook) -> None:
    workload(book, 60)
    assert client.xlen(book.keys.index_changes) > 60
    assert book.catch_up_index() == IndexLag()
    assert client.xlen(book.keys.index_changes) == 0
    assert indexes(client, book) == rebuilt(client, book)
    assert set(SORT_INDEXED) == {"started", "ended", "runtime", "attempts"}


def test_a_key_written_in_several_commands_gives_the_same_indexes(
    client: redis.Redis, book: RedisBook, monkeypatch: Any
) -> None:
    """A batch writes each key's members in one ZADD or ZREM of at most OPERANDS_PER_CALL
    operands; split into many (here 4 operands a command), the indexes are the same."""
    monkeypatch.setattr(indexer, "OPERANDS_PER_CALL", 4)
    workload(book, 60)
    assert book.catch_up_index() == IndexLag()
    assert indexes(client, book) == rebuilt(client, book)
    workers = client.zrange(book.keys.workers, 0, -1, withscores=True)
    assert workers == [(b"w0", 2057.0), (b"w1", 2058.0), (b"w2", 2059.0)]  # latest starts


def test_a_read_catches_up_first(book: RedisBook) -> None:
    workload(book, 12)
    counts = book.count_by_state()  # no indexer ran: the read caught up
    assert counts == {
        "queued": 4, "running": 2, "succeeded": 2, "failed": 2, "expired": 0, "cancelled": 2,
    }  # fmt: skip
    assert book.search(state="queued").index_lag == IndexLag()


def test_a_read_says_how_far_behind_it_stayed(client: redis.Redis, book: RedisBook) -> None:
    book.create_many([CreateSpec(f"q{i}", 1_000, 10**12, 1) for i in range(30)])
    lag = book.catch_up_index(batches=0)  # none applied: how far behind
    assert lag.entries == 30
    assert lag.oldest_age_ms is not None
    assert 0 <= lag.oldest_age_ms < 60_000
    assert client.zcard(book.keys.state_index("queued")) == 0
    assert book.catch_up_index().entries == 0
    assert client.zcard(book.keys.state_index("queued")) == 30


def test_a_batch_another_indexer_took_is_not_applied_twice(
    client: redis.Redis, book: RedisBook
) -> None:
    workload(book, 12)
    shard = book.ns.first
    first = indexer.index_batch(shard, 5)
    request = next(first)  # the batch read ...
    rows = book.engine.run(_asked(request))
    script = first.send(rows)
    book.engine.run(indexer.catch_up(shard))  # ... another indexer applies it
    reply = book.engine.run(_asked(script))  # the first one's call is refused
    assert reply[0] == b"!moved"
    assert indexes(client, book) == rebuilt(client, book)


def _asked(request: Any) -> Any:
    return (yield request)


def test_an_indexer_killed_mid_run_and_a_second_one_count_nothing_twice(
    client: redis.Redis, book: RedisBook
) -> None:
    """A backlog indexed by a process killed (SIGKILL) mid-run, then by two indexers at
    once: the indexes equal a rebuild from the records, and every index, count and stat
    equals the same workload's on a namespace indexed once, in one go."""
    twin = RedisBook(client, namespace=book.namespace + "-twin")
    workload(twin, 600)
    twin.catch_up_index(batches=1_000)
    workload(book, 600)
    backlog = client.xlen(book.keys.index_changes)
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    args = [sys.executable, "-c", INDEXER, REDIS_URL, book.namespace]
    killed = subprocess.Popen(args, stdout=subprocess.PIPE, env=env)
    assert killed.stdout is not None
    assert killed.stdout.readline() == b"ready\n"
    deadline = time.monotonic() + 60
    while client.xlen(book.keys.index_changes) > backlog * 2 // 3:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()
    killed.stdout.close()
    left = client.xlen(book.keys.index_changes)
    assert 0 < left < backlog
    second = subprocess.Popen(args, stdout=subprocess.PIPE, env=env)
    try:
        assert second.stdout is not None
        assert second.stdout.readline() == b"ready\n"
        for _ in range(200):  # an indexer here, while the second process indexes
            book.catch_up_index(1)
        while client.xlen(book.keys.index_changes):
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        second.kill()
        second.wait()
        if second.stdout is not None:
            second.stdout.close()
    assert indexes(client, book) == rebuilt(client, book)
    try:
        assert console_state(client, book) == console_state(client, twin)
        assert console_state(client, book)[":nt"][b"gen|S"] == b"100"  # each start once
    finally:
        delete_namespace(client, twin.namespace)
