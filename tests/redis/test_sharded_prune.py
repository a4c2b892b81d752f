"""``prune`` on a namespace of four shards: a pass looks at ``limit`` entries per index in
all (a quarter in each shard), so the sweep's pass each second costs what it costs on one
shard; passes in turn still drop every entry whose record expired."""

from __future__ import annotations

import time
from datetime import timedelta

import redis

from asyncbook import RedisBook

from ..support.books import delete_namespace

FAR = 10**12


def test_prune_shares_its_limit_among_the_shards(client: redis.Redis, namespace: str) -> None:
    book = RedisBook(client, namespace=namespace, retention=timedelta(milliseconds=50), shards=4)
    try:
        ids = [f"t{n}" for n in range(40)]
        for task_id in ids:
            book.create(id=task_id, now_ms=0, ttl_ms=FAR, max_attempts=1)
            book.apply(task_id, {"type": "expire", "atMs": 1})
        time.sleep(0.2)  # every record is now past the retention
        assert all(book.get(task_id) is None for task_id in ids)
        assert book.count_by_state()["expired"] == 40  # the index entries are still there
        book.prune(limit=8)
        left = book.count_by_state()["expired"]
        assert 32 <= left < 40  # two entries of the state index per shard, not eight each
        for _ in range(40):
            if book.count_by_state()["expired"] == 0:
                break
            book.prune(limit=8)
        assert book.count_by_state()["expired"] == 0
    finally:
        delete_namespace(client, namespace)
