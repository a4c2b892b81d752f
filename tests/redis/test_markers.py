"""Callback markers in the task's hash (issue 32's memory lever), still global and exact.

On one shard the marker of a callback id derived from a task's id (its book's home rule
names the task: ``<id>:<rest>``, or ``<x>:<id>:<rest>`` as the Celery integration's rule
reads ``celery:<id>:<rest>``) is a field of that task's hash; any other id keeps a key of
its own, and a marker written as a key before the upgrade still counts.
"""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import redis

from asyncbook import ApplyItem, AsyncEvent, MemoryBook, RedisBook
from asyncbook.celery import celery_home
from asyncbook.redis._shard import Shard

from ..support.events import fail, progress, start, succeed


def reasons(results: list[Any]) -> list[str]:
    return [getattr(result, "reason", repr(result)) for result in results]


def marker_keys(client: redis.Redis, book: RedisBook) -> list[bytes]:
    return sorted(client.scan_iter(match=book.keys.tag + ":c:*"))


def test_a_tasks_own_markers_live_in_its_hash_and_expire_with_it(
    client: redis.Redis, namespace: str
) -> None:
    book = RedisBook(client, namespace=namespace, retention=timedelta(hours=1), home_of=celery_home)
    book.create(id="t1", now_ms=0, ttl_ms=10_000, max_attempts=2)
    items: list[ApplyItem] = [
        ("t1", start(at=1), "t1:s:0"),
        ("t1", progress(40, at=2), "celery:t1:progress:0:40:n"),
        ("t1", fail(at=3, retryable=True), "t1:r:0"),
    ]
    assert reasons(book.apply_many(items)) == ["started", "progress", "requeued"]
    both: list[ApplyItem] = [("t1", start(at=4), "t1:s:1"), ("t1", succeed(at=5), "t1:ok:1")]
    assert reasons(book.apply_many(both)) == ["started", "succeeded"]  # start_and_end
    assert marker_keys(client, book) == []
    fields = client.hgetall(book.keys.task("t1"))
    assert {b":s:0", b"celery::progress:0:40:n", b":r:0", b":s:1", b":ok:1"} <= set(fields)
    assert client.object("encoding", book.keys.task("t1")) == b"listpack"
    assert 0 < client.pttl(book.keys.task("t1")) <= 3_600_000
    for task_id, event, callback in [*items, *both]:
        assert book.apply(task_id, event, callback).reason == "duplicate-callback"
    assert reasons(book.apply_many([*items, *both])) == ["duplicate-callback"] * 5


def test_markers_are_global_across_tasks(client: redis.Redis, namespace: str) -> None:
    book = RedisBook(client, namespace=namespace, home_of=celery_home)
    for task_id in ("a", "b", "celery"):
        book.create(id=task_id, now_ms=0, ttl_ms=10_000, max_attempts=1)
    book.apply("a", start(at=1), "a:s")  # a's field
    assert book.apply("b", start(at=1), "a:s").reason == "duplicate-callback"
    assert book.apply("b", start(at=1), "b:p").reason == "started"
    book.apply("a", progress(10, at=2), "b:q")  # another task's id: a key of its own
    assert book.apply("b", progress(20, at=2), "b:q").reason == "duplicate-callback"
    book.apply("a", progress(20, at=3), "celery:a:progress:0:20:x")
    assert book.apply("celery", start(at=4), "celery:a:progress:0:20:x").reason == (
        "duplicate-callback"
    )
    assert book.apply("celery", start(at=4), "celery:x").reason == "started"
    assert book.apply("a", progress(30, at=5), "celery:x").reason == "duplicate-callback"
    assert marker_keys(client, book) == [book.keys.callback("b:q").encode()]


def test_an_id_too_long_for_a_compact_hash_keeps_its_key(
    book: RedisBook, client: redis.Redis
) -> None:
    book.create(id="a", now_ms=0, ttl_ms=10_000, max_attempts=1)
    long_id = "a:" + "x" * 64
    assert book.apply("a", start(at=1), long_id).reason == "started"
    assert marker_keys(client, book) == [book.keys.callback(long_id).encode()]
    assert client.object("encoding", book.keys.task("a")) == b"listpack"
    assert book.apply("a", progress(5, at=2), long_id).reason == "duplicate-callback"


def test_a_marker_written_as_a_key_before_the_upgrade_still_dedupes(
    client: redis.Redis, namespace: str
) -> None:
    """A task created by the previous version, its callbacks' markers keys of their own
    (as that version wrote them): the same callbacks are duplicates now, one by one and
    in a batch (the start-and-end path too)."""
    book = RedisBook(client, namespace=namespace, home_of=celery_home)
    book.create(id="old", now_ms=0, ttl_ms=10_000, max_attempts=2)
    assert book.apply("old", start(at=1), None).reason == "started"
    assert book.apply("old", fail(at=2, retryable=True), None).reason == "requeued"
    for callback in ("old:s:0", "old:r:0", "old:s:1", "old:ok:1", "celery:old:p:0:40:n"):
        client.set(book.keys.callback(callback), "1", px=60_000)  # the old layout
    assert book.apply("old", fail(at=3), "old:s:0").reason == "duplicate-callback"
    assert book.apply("old", progress(40, at=3), "celery:old:p:0:40:n").reason == (
        "duplicate-callback"
    )
    both: list[ApplyItem] = [("old", start(at=4), "old:s:1"), ("old", succeed(at=5), "old:ok:1")]
    assert reasons(book.apply_many(both)) == ["duplicate-callback"] * 2
    assert book.get("old").state == "queued"  # type: ignore[union-attr]
    assert reasons(book.apply_many([("old", start(at=4), "old:s:2")])) == ["started"]


def test_sharded_namespaces_keep_marker_keys() -> None:
    one, sharded = Shard("ns", 8, None, home_of=celery_home), Shard("ns", 8, None, (1, 4))
    assert sharded.marker("t", "t:s:0") == "1"
    assert Shard("ns", 8, None).marker("t", "t:s:0") == "1"  # no home rule: keys
    assert one.marker("t", "t:s:0") == "h:s:0"
    assert one.marker("t", "celery:t:s:0") == "hcelery::s:0"
    assert one.marker("t", "celery::s:0") == "x05::s:0{ns}:t:celery"  # home: "celery"
    assert one.marker("celery", "celery:s") == "h:s"
    assert one.marker("t", "u:s") == "x02:s{ns}:t:u"
    assert one.marker("t", "t") == "1"
    assert one.marker("t", ":t") == "1"
    assert one.marker("t", "a:" + "b" * 63)[:3] == "x64"
    assert one.marker("t", "a:" + "b" * 64) == "1"  # longer than a compact hash's values
    assert one.marker("t", "t:\u00e9") == "1"  # its length in bytes is not in characters
    assert one.marker("t", "\u00e9:x") == "x02:x{ns}:t:\u00e9"


def test_random_callbacks_answer_as_the_memory_book(client: redis.Redis, namespace: str) -> None:
    """Ids derived from each task's, from others', in both forms, and plain ones, on
    random tasks, one by one and in batches: every answer equals the memory book's."""
    book = RedisBook(client, namespace=namespace, home_of=celery_home)
    memory = MemoryBook()
    rng = random.Random(32)
    tasks = ["a", "b", "celery", "a:b", "\u00e9"]
    callbacks = [
        "a:1", "a:2", "b:1", "celery:a:1", "celery:b:1", "celery::1", "celery:1", "a:b:1",
        "a", "x", "", ":a", "a:", "celery:a:", "b:" + "y" * 70, "\u00e9:1", "a:\u00e9",
        "celery:\u00e9:1",
    ]  # fmt: skip
    for target in (book, memory):
        for task_id in tasks:
            target.create(id=task_id, now_ms=0, ttl_ms=10_000, max_attempts=3)
    for step in range(300):
        task_id = rng.choice(tasks)
        events: list[AsyncEvent] = [start(at=step), progress(rng.randrange(101), at=step)]
        event = rng.choice([*events, fail(at=step, retryable=True)])
        callback = rng.choice(callbacks) if rng.random() < 0.9 else None
        if rng.random() < 0.5:
            assert book.apply(task_id, event, callback).reason == (
                memory.apply(task_id, event, callback).reason
            ), step
        else:
            other = rng.choice(tasks)
            batch: list[ApplyItem] = [
                (task_id, event, callback),
                (other, succeed(at=step), rng.choice(callbacks)),
            ]
            assert reasons(book.apply_many(batch)) == reasons(memory.apply_many(batch)), step


def test_histories_read_exactly_whatever_the_texts(book: RedisBook) -> None:
    """Quotes, backslashes, JSON fragments, control and non-ASCII characters, the task's
    id and deadline digits, in every event's fields: every history and every duplicate
    callback reads back as the memory book holds it."""
    memory = MemoryBook()
    rng = random.Random(7)
    bits = ['"', "\\", ',"worker":"', ',"retryable":true}', "\x01", "\x15", "\u00e9", "}", "170"]
    for n in range(40):
        task_id = f"{rng.choice(['', 'celery-'])}id-{n}{rng.choice(bits)}"
        at = rng.choice([0, 1_700_000_000_000, 1.5])

        def text(palette: list[str] = [*bits, task_id, "x"]) -> str:  # noqa: B006
            return "".join(rng.choice(palette) for _ in range(rng.randrange(4)))

        life: list[AsyncEvent] = [
            start(at=at + 1, worker=text()),
            progress(10, at=at + 2, cursor=text()),
            fail(at=at + 3, error=text(), retryable=True),
            start(at=at + 4, worker=text()),
            succeed(
                at=at + 5, ref=text() or "r", digest=rng.choice(["sha256:", ""]) + text() + "h"
            ),
        ]
        for target in (book, memory):
            target.create(id=task_id, now_ms=at, ttl_ms=10**6, max_attempts=2)
            for event in life:
                target.apply(task_id, event, None)
        assert book.get(task_id) == memory.get(task_id), task_id
        assert book.resume(task_id, 2) == memory.resume(task_id, 2), task_id
