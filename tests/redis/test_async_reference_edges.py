"""``AsyncRedisBook(..., shards=4)`` on the edges where sharded books parted from the
reference (issue 30): the empty callback id is global, a blank key is refused first."""

from __future__ import annotations

import asyncio
import uuid

import fakeredis
import pytest

from asyncbook import AsyncBookError, RedisBook
from asyncbook.redis import AsyncRedisBook

from ..support.events import start

TASKS = [f"t{n}" for n in range(8)]


def test_the_empty_callback_id_is_global_to_an_asyncio_cancel() -> None:
    server = fakeredis.FakeServer()
    namespace = f"edges-{uuid.uuid4().hex[:8]}"
    sync = fakeredis.FakeRedis(server=server)
    writer = RedisBook(sync, namespace=namespace, shards=4)
    for task_id in TASKS:
        writer.create(id=task_id, now_ms=0, ttl_ms=100, max_attempts=1)
    writer.apply(TASKS[0], start(), "")

    async def scenario() -> list[str]:
        client = fakeredis.aioredis.FakeRedis(server=server)
        async with AsyncRedisBook(client, namespace=namespace, shards=4) as book:
            reasons: list[str] = [
                (await book.cancel(task_id, callback_id="")).reason for task_id in TASKS
            ]
            for key in ("", " ", "\ufeff"):
                with pytest.raises(AsyncBookError) as caught:
                    await book.deliver_result(TASKS[1], key, -1)
                assert caught.value.field == "idempotencyKey"
            return reasons

    assert asyncio.run(scenario()) == ["duplicate-callback"] * len(TASKS)
    states = [task.state for task in map(writer.get, TASKS) if task is not None]
    assert states == ["running"] + ["queued"] * (len(TASKS) - 1)
