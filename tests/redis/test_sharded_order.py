"""Newest first across the shards of a namespace: pages merged from every shard, and the
order of a ``create_many`` batch."""

from __future__ import annotations

import pytest
import redis

from asyncbook import AsyncBookError, CreateSpec, MemoryBook, RedisBook, StartEvent
from asyncbook._limits import TASK_ID_LIMIT
from asyncbook.redis import ShardedRedisBook


@pytest.mark.xfail(
    strict=True,
    reason="issue 20: on S > 1 a create_many batch is written a thread per shard, and each "
    "shard numbers its part by the server clock when it runs: the batch's order is lost",
)
def test_a_batch_lists_newest_first_in_its_order(client: redis.Redis, namespace: str) -> None:
    specs = [CreateSpec(f"job-{n}", 0, 60_000, 1) for n in range(64)]
    reference = MemoryBook()
    reference.create_many(specs)
    expected = [task.id for task in reference.list_tasks(limit=100).tasks]
    assert expected == [spec.id for spec in reversed(specs)]
    book = RedisBook(client, namespace=namespace, shards=4)
    book.create_many(specs)
    assert [task.id for task in book.list_tasks(limit=100).tasks] == expected


def _newest_first(client: redis.Redis, book: ShardedRedisBook, ids: list[str]) -> list[str]:
    """``ids`` by their stored creation order, newest first (what a page must follow)."""
    seq: dict[str, int] = {}
    for task_id in ids:
        raw = client.hget(book.shard_of(task_id).keys.task(task_id), "seq")
        assert raw is not None
        seq[task_id] = int(raw)
    return sorted(ids, key=lambda task_id: -seq[task_id])


@pytest.mark.parametrize("state", [None, "queued"])
def test_pages_follow_creation_order_when_one_shard_holds_the_newest(
    client: redis.Redis, namespace: str, state: str | None
) -> None:
    """A page reads a few rows per shard first, and a whole page from a shard whose
    unread rows may belong on it: here one shard holds every one of the newest tasks."""
    book = RedisBook(client, namespace=namespace, shards=16)
    assert isinstance(book, ShardedRedisBook)
    spread = [f"old-{n}" for n in range(40)]
    crowded = [f"new-{n}" for n in range(400) if book.map.index_of(f"new-{n}") == 3][:70]
    for task_id in [*spread, *crowded]:
        book.create(id=task_id, now_ms=0, ttl_ms=60_000, max_attempts=1)
    started = [*spread[::5], *crowded[::3]]  # lists of two states, cut at other rows
    for task_id in started:
        book.apply(task_id, StartEvent(at_ms=1, worker="w"))
    chosen = [t for t in [*spread, *crowded] if state is None or t not in started]
    expected = _newest_first(client, book, chosen)
    for limit in (1, 7, 50, 100):
        listed: list[str] = []
        after: str | None = None
        while True:
            page = book.list_tasks(state, limit=limit, after=after, full_task=False)
            assert len(page.tasks) <= limit
            listed += [task.id for task in page.tasks]
            if page.next_after is None:
                break
            after = page.next_after
        assert listed == expected, limit


def test_a_sharded_book_refuses_an_id_over_the_limit(client: redis.Redis, namespace: str) -> None:
    book = RedisBook(client, namespace=namespace, shards=4)
    long_id = "s" * (TASK_ID_LIMIT + 1)
    with pytest.raises(AsyncBookError) as caught:
        book.create(id=long_id, now_ms=0, ttl_ms=60_000, max_attempts=1)
    assert (caught.value.code, caught.value.field) == ("invalid-request", "taskId")
    (answer,) = book.create_many([CreateSpec(long_id, 0, 60_000, 1)])
    assert isinstance(answer, AsyncBookError)
    assert book.get(long_id) is None
    assert sum(book.count_by_state().values()) == 0
