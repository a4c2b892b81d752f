"""``AsyncRedisBook.follow_output``: chunks as they are appended, across a retry, until
the task ends; a follower that comes back with its cursor misses and repeats nothing
(real Redis, fakeredis and a Redis Cluster)."""

from __future__ import annotations

import asyncio
import contextlib

from asyncbook import AsyncRedisBook, OutputChunk

from ..support.events import fail, start, succeed
from .test_async_book import NOW, Store, store

__all__ = ["store"]  # the fixture, shared with test_async_book


async def _writer(book: AsyncRedisBook) -> None:
    for n in range(5):
        await book.append_output("f", f"a{n}")
        await asyncio.sleep(0.01)
    await book.apply("f", fail(at=NOW + 1, retryable=True))
    await book.apply("f", start(at=NOW + 2))
    await book.append_output("f", "b0", "b1")
    await asyncio.sleep(0.05)
    await book.apply("f", succeed(at=NOW + 3))


def test_a_follower_sees_every_chunk_once_then_the_end(store: Store, namespace: str) -> None:
    sync = store.sync(namespace)
    sync.create(id="f", now_ms=NOW, ttl_ms=10**9, max_attempts=2)
    sync.apply("f", start(at=NOW))

    async def follow(book: AsyncRedisBook) -> tuple[list[OutputChunk], list[OutputChunk]]:
        book.output_wait_ms = 50
        writing = asyncio.create_task(_writer(book))
        first: list[OutputChunk] = []
        feed = book.follow_output("f", 0)
        async with contextlib.aclosing(feed):
            async for chunk in feed:
                first.append(chunk)
                if len(first) == 3:
                    break  # a disconnect: come back with the cursor
        rest = [chunk async for chunk in book.follow_output("f", first[-1].seq)]
        await writing
        return first, rest

    first, rest = store.run(namespace, follow)
    chunks = first + rest
    assert [c.chunk for c in chunks] == ["a0", "a1", "a2", "a3", "a4", "b0", "b1"]
    assert [c.seq for c in chunks] == list(range(1, 8))
    assert [c.attempt for c in chunks] == [1] * 5 + [2] * 2
