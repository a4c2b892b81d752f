"""``OutputFeeds``: followers of one task share one reader; each gets every chunk after
its own cursor once, a follower behind the feed's start reads its gap first, and a
failing book's error reaches every follower."""

from __future__ import annotations

import asyncio

import pytest

from asyncbook import BookUnavailableError, MemoryBook, OutputChunk, OutputPage
from asyncbook._output_feed import OutputFeeds

from ..support.events import start, succeed


class Counted:
    """A MemoryBook read awaited, counting its reads."""

    def __init__(self, book: MemoryBook) -> None:
        self.book = book
        self.reads = 0
        self.fail = False

    async def read(self, task_id: str, cursor: int) -> OutputPage:
        self.reads += 1
        if self.fail:
            raise BookUnavailableError("down")
        return self.book.output(task_id, cursor)

    async def wait(self, task_id: str, cursor: int) -> None:
        await asyncio.sleep(0.005)


def running(book: MemoryBook) -> None:
    book.create(id="t", now_ms=0, ttl_ms=10**12, max_attempts=1)
    book.apply("t", start(at=1))


async def collect(feeds: OutputFeeds, cursor: int) -> list[OutputChunk]:
    return [chunk async for chunk in feeds.follow("t", cursor)]


def test_followers_share_one_reader_and_miss_nothing() -> None:
    book = MemoryBook()
    running(book)
    book.append_output("t", "a", "b")
    counted = Counted(book)

    async def scenario() -> list[list[OutputChunk]]:
        feeds = OutputFeeds(counted.read, counted.wait)
        late = asyncio.create_task(collect(feeds, 0))  # behind the others' start: reads 1..2
        followers = [asyncio.create_task(collect(feeds, 2)) for _ in range(50)]
        for n in range(20):
            book.append_output("t", f"c{n}")
            await asyncio.sleep(0.002)
        book.apply("t", succeed(at=2))
        return await asyncio.gather(late, *followers)

    got = asyncio.run(scenario())
    assert [c.chunk for c in got[0]] == ["a", "b", *[f"c{n}" for n in range(20)]]
    for one in got[1:]:
        assert [c.seq for c in one] == list(range(3, 23))
    assert counted.reads < 51 + 2 * 200  # one first read each, then one reader's reads


def test_a_failing_book_reaches_every_follower() -> None:
    book = MemoryBook()
    running(book)
    counted = Counted(book)

    async def scenario() -> None:
        feeds = OutputFeeds(counted.read, counted.wait)
        followers = [asyncio.create_task(collect(feeds, 0)) for _ in range(3)]
        await asyncio.sleep(0.02)
        counted.fail = True
        for follower in followers:
            with pytest.raises(BookUnavailableError):
                await follower

    asyncio.run(scenario())
