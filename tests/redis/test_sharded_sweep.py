"""The sweep of a sharded namespace expires each shard's due tasks on its own (the shards
at once), with the report and the notifications of a sweep over one shard."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from asyncbook import RedisBook, sweep
from asyncbook._sweep import Sharded
from asyncbook.redis import ShardedRedisBook, connect

from ..support.books import delete_namespace


def test_a_sharded_book_is_swept_shard_by_shard(
    client: redis.Redis, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    book = RedisBook(client, namespace=namespace, shards=4)
    assert isinstance(book, ShardedRedisBook)
    assert isinstance(book, Sharded)
    assert isinstance(RedisBook(client, namespace=f"{namespace}-one"), Sharded)  # S = 1 too
    now = book.now_ms()
    due = [f"due-{n}" for n in range(250)]
    for task_id in due:
        book.create(id=task_id, now_ms=now - 60_000, ttl_ms=1_000, max_attempts=1)
    book.create(id="later", now_ms=now, ttl_ms=3_600_000, max_attempts=1)

    def merged(*_: Any, **__: Any) -> list[str]:
        raise AssertionError("the sweep merged every shard's overdue list")

    monkeypatch.setattr(ShardedRedisBook, "overdue", merged)
    report = sweep(book, now, batch=20)
    assert (report.expired, report.errors) == (250, 0)
    per_shard = [sum(book.map.index_of(task_id) == k for task_id in due) for k in range(4)]
    assert report.batches == sum(-(-count // 20) for count in per_shard)
    monkeypatch.undo()
    assert book.count_by_state()["expired"] == 250
    assert book.overdue_count(now) == 0
    assert sorted(note.task_id for note in book.drain_notifications()) == sorted(due)
    assert book.last_sweep_ms() == now
    assert sweep(book, now).expired == 0


def test_on_a_cluster_the_nodes_are_swept_at_once(cluster_url: str, namespace: str) -> None:
    client = connect(cluster_url)
    book = RedisBook(client, namespace=namespace, shards=16)
    assert isinstance(book, ShardedRedisBook)
    try:
        assert len(book.shard_map()) == 3
        assert book.each_shard(lambda shard: shard.index) == list(range(16))
        now = book.now_ms()
        for n in range(200):
            book.create(id=f"due-{n}", now_ms=now - 60_000, ttl_ms=1_000, max_attempts=1)
        report = sweep(book, now, batch=10)
        assert (report.expired, report.errors) == (200, 0)
        assert book.overdue_count(now) == 0
        assert len(book.drain_notifications()) == 200
    finally:
        delete_namespace(client, namespace)
        client.close()


def test_a_group_the_sweep_ends_over_shards_is_notified_as_on_one_shard(
    client: redis.Redis, namespace: str
) -> None:
    """A sealed group of eight over four shards, expired by the sweep (each shard on its
    own): one group notification, with the counts a one-shard book's sweep writes."""
    notes = []
    for name, shards in ((f"{namespace}-one", 1), (namespace, 4)):
        book = RedisBook(client, namespace=name, shards=shards)
        members = [f"member-{n}" for n in range(8)]
        if book.shards > 1:
            assert {book.map.index_of(task_id) for task_id in members} == set(range(4))
        try:
            for task_id in members:
                book.create(id=task_id, now_ms=0, ttl_ms=10, max_attempts=1, group_id="g")
            book.seal_group("g", len(members))
            assert sweep(book, 1_000).expired == len(members)
            notes.append(
                [
                    (note.group_id, note.total, note.counts)
                    for note in book.drain_group_notifications()
                ]
            )
        finally:
            delete_namespace(client, name)
    assert (
        notes[1]
        == notes[0]
        == [("g", 8, {"succeeded": 0, "failed": 0, "expired": 8, "cancelled": 0})]
    )
