"""RedisBook beyond the shared contract: concurrency, scripts, keys, outbox, retention."""

from __future__ import annotations

import json
import multiprocessing
import random
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.crc import key_slot

from asyncbook import ApplyItem, AsyncBookError, MemoryBook, PublishInfo, RedisBook, to_wire
from asyncbook.redis import KeySchema, connect, escape_id

from ..support.books import REDIS_URL, delete_namespace, scripts_flushed
from ..support.cluster import require_binaries
from ..support.events import fail, progress, start, succeed
from ..support.servers import free_port, redis_server, wait_until

HOSTILE_IDS = [
    "{a}",
    "a}",
    "{",
    "}{",
    "a:b",
    "a:b:c",
    "*",
    "?[x]",
    "has space",
    "line\nbreak",
    "tab\t",
    "émoji-\U0001f600",
    "中文",
    "%7B",
    "%",
    "x" * 4096,
    "{asyncbook}:t:victim",
    "\x00nul",
]


def task_stream(tasks: int, seed: int) -> list[ApplyItem]:
    """Every task's events in order, interleaved at random across tasks, each sent 3 times."""
    rng = random.Random(seed)
    lives: list[list[ApplyItem]] = []
    for index in range(tasks):
        task_id = f"task-{index}"
        steps: list[Any] = [start(at=1), progress(30, at=2), progress(60, at=3)]
        if index % 5 == 0:
            steps += [fail(at=4, retryable=True), start(at=5), succeed(at=6)]
        elif index % 7 == 0:
            steps += [fail(at=4, error="fatal")]
        else:
            steps += [succeed(at=4)]
        lives.append([(task_id, step, f"{task_id}:{n}") for n, step in enumerate(steps)])
    stream: list[ApplyItem] = []
    while any(lives):
        life = rng.choice([life for life in lives if life])
        stream += [life[0]] * 3
        life.pop(0)
    return stream


def apply_stream(url: str, namespace: str, tasks: int, seed: int) -> None:
    book = RedisBook.from_url(url, namespace=namespace)
    stream = task_stream(tasks, seed)
    for start_at in range(0, len(stream), 25):
        for result in book.apply_many(stream[start_at : start_at + 25]):
            assert not isinstance(result, AsyncBookError), result


@pytest.mark.long
def test_eight_processes_apply_each_event_once(client: redis.Redis, namespace: str) -> None:
    tasks, seed = 200, 7
    book = RedisBook(client, namespace=namespace)
    expected = MemoryBook()
    for index in range(tasks):
        for target in (book, expected):
            target.create(id=f"task-{index}", now_ms=0, ttl_ms=10_000, max_attempts=2)
    for item in task_stream(tasks, seed):
        expected.apply(*item)
    context = multiprocessing.get_context("spawn")
    workers = [
        context.Process(target=apply_stream, args=(REDIS_URL, namespace, tasks, seed))
        for _ in range(8)
    ]
    try:
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(90)
            assert worker.exitcode == 0
        for index in range(tasks):
            task = book.get(f"task-{index}")
            assert task is not None
            assert to_wire(task) == to_wire(expected.get(f"task-{index}"))  # type: ignore[arg-type]
            assert [entry.version for entry in task.history] == list(range(1, task.version + 1))
        notes = book.drain_notifications()
        assert [to_wire(n) for n in notes] == [to_wire(n) for n in expected.drain_notifications()]
        assert len({note.task_id for note in notes}) == len(notes) == tasks
    finally:
        for worker in workers:
            if worker.is_alive():
                worker.kill()
        delete_namespace(client, namespace)


@pytest.mark.parametrize("functions_too", [False, True])
def test_script_flush_mid_run(book: RedisBook, client: redis.Redis, functions_too: bool) -> None:
    def flush() -> None:
        client.script_flush()
        if functions_too:
            client.function_flush()

    book.create(id="a", now_ms=0, ttl_ms=100, max_attempts=1)
    book.create(id="b", now_ms=0, ttl_ms=100, max_attempts=1)
    book.apply("a", start())
    flush()
    assert book.apply("a", progress(10)).reason == "progress"
    flush()
    results = book.apply_many([("a", progress(20), None), ("b", start(), None)])
    assert [getattr(r, "reason", r) for r in results] == ["progress", "started"]
    flush()
    assert [getattr(r, "reason", r) for r in book.expire_many(["b"])] == ["expired"]
    flush()
    assert book.get("a") is not None
    assert book.resume("a", 1).mode == "delta"


def test_scripts_flushed_again_and_again(book: RedisBook, client: redis.Redis) -> None:
    """Another client flushing scripts in a loop never surfaces as NOSCRIPT."""
    with scripts_flushed():
        for index in range(150):
            book.create(id=f"t{index}", now_ms=0, ttl_ms=100, max_attempts=1)
            assert book.apply(f"t{index}", start(), f"cb{index}").reason == "started"
            assert book.apply_many([(f"t{index}", progress(5), None)])[0].reason == "progress"  # type: ignore[union-attr]


STATE_OF = """
local st = redis.call('HGET', KEYS[1], 'st')
redis.call('SET', KEYS[2], st)
return {'seen', st}
"""


def test_apply_many_then_runs_one_more_script_in_the_transaction(
    book: RedisBook, client: redis.Redis, namespace: str
) -> None:
    """The extra script runs after the events, in the same MULTI/EXEC: it sees their
    effect; after a SCRIPT FLUSH both scripts are loaded again and everything runs once."""
    book.create(id="a", now_ms=0, ttl_ms=100, max_attempts=1)
    script = book.extra_script(STATE_OF)
    seen = f"{{{namespace}}}:seen"
    keys = [book.keys.task("a"), seen]
    results, reply = book.apply_many_then(
        [("a", start(), "cb-start"), ("a", progress(40), None)], script, keys, []
    )
    assert [getattr(r, "reason", r) for r in results] == ["started", "progress"]
    assert reply == [b"seen", b"running"]
    client.script_flush()
    results, reply = book.apply_many_then(
        [("a", start(), "cb-start"), ("a", succeed(at=5), None)], script, keys, []
    )
    assert [getattr(r, "reason", r) for r in results] == ["duplicate-callback", "succeeded"]
    assert reply == [b"seen", b"succeeded"]
    assert client.get(seen) == b"succeeded"
    task = book.get("a")
    assert task is not None
    assert [entry.event.type for entry in task.history] == ["start", "progress", "succeed"]
    # apply.lua lost but the extra script cached: the extra runs again after the events.
    book.create(id="b", now_ms=0, ttl_ms=100, max_attempts=1)
    keys_b = [book.keys.task("b"), seen]
    client.script_flush()
    assert script(keys_b, []) == [b"seen", b"queued"]
    results, reply = book.apply_many_then([("b", start(), "cb-b")], script, keys_b, [])
    assert [getattr(r, "reason", r) for r in results] == ["started"]
    assert reply == [b"seen", b"running"]
    # No events: the script alone; an error it raises is raised.
    assert book.apply_many_then([], script, keys, [])[1] == [b"seen", b"succeeded"]
    failing = book.extra_script("return redis.error_reply('nope')")
    with pytest.raises(redis.ResponseError, match="nope"):
        book.apply_many_then([("a", progress(50), None)], failing, [], [])


def test_hostile_ids_stay_separate(book: RedisBook, client: redis.Redis) -> None:
    for index, task_id in enumerate(HOSTILE_IDS):
        book.create(id=task_id, now_ms=0, ttl_ms=1000 + index, max_attempts=1)
    for index, task_id in enumerate(HOSTILE_IDS):
        result = book.apply(task_id, start(at=1, worker=f"w{index}"), callback_id=task_id)
        assert result.reason == "started", task_id
        book.apply(task_id, succeed(at=2, ref=task_id, digest="h"), callback_id=f"{task_id}:done")
        book.deliver_result(task_id, idempotency_key=task_id, now_ms=3)
    for index, task_id in enumerate(HOSTILE_IDS):
        task = book.get(task_id)
        assert task is not None
        assert (task.id, task.expires_at_ms, task.result_ref) == (task_id, 1000 + index, task_id)
        assert task.history[0].event.worker == f"w{index}"  # type: ignore[union-attr]
        receipt = book.deliver_result(task_id, idempotency_key=task_id, now_ms=9).receipt
        assert receipt is not None
        assert receipt.task_id == task_id
    ids = [note.task_id for note in book.drain_notifications()]
    assert sorted(ids) == sorted(HOSTILE_IDS)
    keys = list(client.scan_iter(match=book.keys.tag + ":*", count=1000))
    assert len(keys) > 4 * len(HOSTILE_IDS)
    assert {key_slot(key) for key in keys} == {key_slot(book.keys.tag.encode())}


def test_key_schema_is_injective_and_brace_free() -> None:
    schema = KeySchema("ns")
    keys = {schema.task(task_id) for task_id in HOSTILE_IDS}
    assert len(keys) == len(HOSTILE_IDS)
    assert escape_id("%7B") != escape_id("{")
    for task_id in HOSTILE_IDS:
        key = schema.task(task_id)
        assert key.index("{") == 0
        assert key.index("}") == 3
        assert "{" not in key[4:]
        assert "}" not in key[4:]


@pytest.mark.parametrize("namespace_value", ["", "a{b", "}", " "])
def test_bad_namespace(client: redis.Redis, namespace_value: str) -> None:
    with pytest.raises(AsyncBookError) as caught:
        RedisBook(client, namespace=namespace_value)
    assert caught.value.field == "namespace"


def test_lone_surrogates_are_refused(book: RedisBook) -> None:
    with pytest.raises(AsyncBookError) as caught:
        book.create(id="bad\ud800", now_ms=0, ttl_ms=1, max_attempts=1)
    assert caught.value.field == "id"


def test_consumer_that_dies_without_ack(book: RedisBook) -> None:
    for task_id in ("a", "b", "c"):
        book.create(id=task_id, now_ms=0, ttl_ms=100, max_attempts=1)
        book.expire(task_id)
    first = book.consume_notifications("mailer", "dies", count=10)
    assert sorted(note.task_id for _, note in first) == ["a", "b", "c"]
    assert book.consume_notifications("mailer", "alive", count=10, min_idle_ms=60_000) == []
    time.sleep(0.05)
    second = book.consume_notifications("mailer", "alive", count=10, min_idle_ms=10)
    assert [entry for entry, _ in second] == [entry for entry, _ in first]
    assert book.ack("mailer", *(entry for entry, _ in second)) == 3
    time.sleep(0.05)
    assert book.consume_notifications("mailer", "third", count=10, min_idle_ms=10) == []
    other = book.consume_notifications("audit", "one", count=10)
    assert len(other) == 3


def test_consume_blocks_until_a_notification(book: RedisBook) -> None:
    book.create(id="a", now_ms=0, ttl_ms=100, max_attempts=1)
    started = time.monotonic()
    assert book.consume_notifications("g", "c", block_ms=100) == []
    assert time.monotonic() - started >= 0.09
    book.expire("a")
    [(_entry, note)] = book.consume_notifications("g", "c", block_ms=100)
    assert (note.task_id, note.state, note.at_ms) == ("a", "expired", 100)


def test_change_feed(book: RedisBook, client: redis.Redis) -> None:
    pubsub = client.pubsub()  # type: ignore[no-untyped-call, unused-ignore]
    pubsub.subscribe(book.keys.changes_channel)
    assert pubsub.get_message(timeout=1)["type"] == "subscribe"
    book.create(id="a", now_ms=0, ttl_ms=100, max_attempts=1)
    book.apply("a", start())
    book.apply("a", start())
    book.apply("a", progress(40))
    seen = []
    while (message := pubsub.get_message(timeout=0.5)) is not None:
        seen.append(json.loads(message["data"]))
    pubsub.close()
    assert seen == [
        {"taskId": "a", "version": 0, "state": "queued", "progress": 0},
        {"taskId": "a", "version": 1, "state": "running", "progress": 0},
        {"taskId": "a", "version": 2, "state": "running", "progress": 40},
    ]


def test_cancels_have_a_channel_of_their_own(book: RedisBook, client: redis.Redis) -> None:
    """Workers follow cancels only: no other change is sent to them."""
    pubsub = client.pubsub()  # type: ignore[no-untyped-call, unused-ignore]
    pubsub.subscribe(book.keys.cancels_channel)
    assert pubsub.get_message(timeout=1)["type"] == "subscribe"
    for task_id in ("a", "b"):
        book.create(id=task_id, now_ms=0, ttl_ms=100, max_attempts=1)
    book.apply("a", start())
    book.apply("a", progress(40))
    book.cancel("b", "not needed", at_ms=5)
    book.cancel("b", "again", at_ms=6)  # a duplicate: no change, nothing sent
    book.apply("a", succeed())
    seen = []
    while (message := pubsub.get_message(timeout=0.5)) is not None:
        seen.append(json.loads(message["data"]))
    pubsub.close()
    assert seen == [{"taskId": "b", "version": 1, "state": "cancelled", "progress": 0}]


def test_resume_without_full_task(book: RedisBook) -> None:
    book.create(id="a", now_ms=0, ttl_ms=1000, max_attempts=1)
    book.apply("a", start())
    for value in range(1, 6):
        book.apply("a", progress(value))
    light = book.resume("a", 4, full_task=False)
    assert (light.mode, [e.version for e in light.events], light.task.history) == (
        "delta",
        [5, 6],
        (),
    )
    assert book.resume("a", 6, full_task=False).task.version == 6
    assert len(book.resume("a", 4).task.history) == 6


@pytest.mark.long
def test_retention_removes_everything(tmp_path: Path) -> None:
    """10k tasks end with a 1 s retention: afterwards no task keys, memory back near start.

    Runs on its own redis-server so that INFO memory measures this test alone.
    """
    require_binaries()
    port = free_port()
    with redis_server(tmp_path / "retention", "--port", str(port)):
        wait_until(lambda: redis.Redis(port=port).ping())
        client = redis.Redis(port=port)
        book = RedisBook(client, namespace="retention", retention=timedelta(seconds=1))
        # Redis 7 keeps a latency histogram per command name (tens of KB each, about
        # 0.9 MB for the commands a run calls): CONFIG RESETSTAT drops them before each
        # measure, which then counts data and not Redis's own statistics.
        client.config_resetstat()
        client.memory_purge()
        before = client.info("memory")["used_memory"]
        for batch in range(0, 10_000, 500):
            ids = [f"task-{n}" for n in range(batch, batch + 500)]
            for task_id in ids:
                info = PublishInfo(name="gen", args="(1,)", queue="q")
                book.create(id=task_id, now_ms=0, ttl_ms=200, max_attempts=1, info=info)
            # The first 50 end and are delivered at once, before the others' batch: with a
            # 1 s retention, a busy machine could otherwise outlast a record it delivers.
            for part, delivered in ((ids[:50], True), (ids[50:], False)):
                items: list[ApplyItem] = []
                for task_id in part:
                    items += [
                        (task_id, start(), f"{task_id}:s"),
                        (task_id, succeed(), f"{task_id}:d"),
                    ]
                book.apply_many(items)
                for task_id in part if delivered else ():
                    book.deliver_result(task_id, f"key-{task_id}", 5)
        assert client.zcard(book.keys.deadlines) == 0
        # The indexes are built off the write path: caught up as a worker's indexer would
        # have (prune itself catches up at most 20 batches of 500 changes).
        book.catch_up_index(batches=1_000)
        time.sleep(1.5)
        # Each task leaves the succeeded index, its name's and the four sort indexes; its
        # worker, last seen in 1970, is forgotten with its index and counts.
        assert book.prune(limit=20_000) == 60_000
        leftover = list(client.scan_iter(match=book.keys.tag + ":*", count=5000))
        # Only the book-wide counters, the (trimmed-by-age) outbox stream, the index's
        # change stream (empty once indexed) and what the console keeps per name and per
        # hour (not per task) may remain.
        names = sorted({key.decode().split(":", 1)[1] for key in leftover})
        assert client.xlen(book.keys.index_changes) == 0
        per_name_and_hour = ["ix", "names", "nt", "s:0:gen", "sa:0"]
        assert names in (
            sorted(["counters", "outbox", "seq", *per_name_and_hour]),
            sorted(["counters", "seq", *per_name_and_hour]),
        ), names
        assert book.get("task-1") is None
        client.delete(book.keys.outbox)
        # Near the start: what is left is the counter and the keyspace's hash tables,
        # which Redis shrinks lazily; 10k live tasks take about 22 MB, so 1 MB is < 5%.
        client.config_resetstat()
        client.memory_purge()
        after = client.info("memory")["used_memory"]
        assert after - before < 1_000_000, (before, after)
        client.close()


def test_cluster_outbox_script_flush_and_listing(cluster_url: str, namespace: str) -> None:
    client = connect(cluster_url)
    book = RedisBook(client, namespace=namespace)
    try:
        for task_id in ("a", "b"):
            book.create(id=task_id, now_ms=0, ttl_ms=100, max_attempts=1)
        client.script_flush()
        assert [getattr(r, "reason", r) for r in book.expire_many(["a", "b"])] == ["expired"] * 2
        client.script_flush()
        assert book.resume("a", 0).mode == "delta"
        read = book.consume_notifications("g", "dies", count=10)
        assert [note.task_id for _, note in read] == ["a", "b"]
        time.sleep(0.05)
        again = book.consume_notifications("g", "alive", count=10, min_idle_ms=10)
        assert book.ack("g", *(entry for entry, _ in again)) == 2
        assert [task.id for task in book.list_tasks(state="expired").tasks] == ["b", "a"]
        assert book.count_by_state()["expired"] == 2
    finally:
        delete_namespace(client, namespace)
        client.close()
