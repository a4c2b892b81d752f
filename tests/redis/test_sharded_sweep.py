"""The sweep of a sharded namespace expires each shard's due tasks on its own (the shards
at once), with the report and the notifications of a sweep over one shard."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from asyncbook import RedisBook, sweep
from asyncbook._sweep import Sharded
from asyncbook.redis import ShardedRedisBook


def test_a_sharded_book_is_swept_shard_by_shard(
    client: redis.Redis, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    book = RedisBook(client, namespace=namespace, shards=4)
    assert isinstance(book, ShardedRedisBook)
    assert isinstance(book, Sharded)
    assert not isinstance(RedisBook(client, namespace=f"{namespace}-one"), Sharded)
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
