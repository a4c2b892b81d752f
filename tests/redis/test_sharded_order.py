"""Newest first across the shards of a namespace: the order of a ``create_many`` batch."""

from __future__ import annotations

import pytest
import redis

from asyncbook import CreateSpec, MemoryBook, RedisBook


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
