"""``OutputFeeds``: one reader per followed task in this process, shared by all its
followers (``follow_output``; the status server's output streams). The reader reads the
task's output from the feed's start and waits on it between reads; each follower walks
the chunks held, from its own cursor, so a hundred followers cost the book one reader.
A follower whose cursor lies before the feed's start reads that gap from the book first.
A feed ends once its task's output is done, or no follower is left (after one wait)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable

from ._output import OutputChunk, OutputPage, require_output_cursor

__all__ = ["OutputFeeds"]

Read = Callable[[str, int], Awaitable[OutputPage]]
"""The chunks of a task after a cursor (a book's ``output``)."""
Wait = Callable[[str, int], Awaitable[object]]
"""Wait a while for a chunk after a cursor (a book's ``wait_output``)."""


class _Feed:
    def __init__(self, task_id: str, first: int) -> None:
        self.task_id = task_id
        self.first = first
        """The cursor the held chunks follow: ``chunks[i].seq == first + i + 1``."""
        self.chunks: list[OutputChunk] = []
        self.done = False
        self.error: BaseException | None = None
        self.followers = 0
        self.moved = asyncio.Event()
        self.reader: asyncio.Task[None] | None = None
        """The task reading for the followers (held: a task nobody holds may vanish)."""

    def ended(self) -> bool:
        return self.done or self.error is not None

    def tell(self) -> None:
        self.moved.set()
        self.moved = asyncio.Event()


class OutputFeeds:
    """The feeds of one book (``read`` and ``wait`` are its calls)."""

    def __init__(self, read: Read, wait: Wait) -> None:
        self._read = read
        self._wait = wait
        self._feeds: dict[str, _Feed] = {}

    async def follow(
        self, task_id: str, cursor: int | str = 0
    ) -> AsyncGenerator[OutputChunk, None]:
        """The task's chunks after ``cursor`` as they come, until its output is done."""
        at = require_output_cursor(cursor)
        page = await self._read(task_id, at)  # an unknown task or a bad cursor: raised here
        feed = self._feeds.get(task_id)
        if feed is None or feed.ended() or at < feed.first:
            feed = self._start(task_id, page)
        feed.followers += 1
        try:
            while True:
                held = feed.chunks[at - feed.first :]
                for chunk in held:
                    yield chunk
                    at = chunk.seq
                if held:
                    continue
                if feed.error is not None:
                    raise feed.error
                if feed.done:
                    return
                await feed.moved.wait()
        finally:
            feed.followers -= 1

    def _start(self, task_id: str, page: OutputPage) -> _Feed:
        first = page.chunks[0].seq - 1 if page.chunks else page.cursor
        feed = _Feed(task_id, first)
        feed.chunks.extend(page.chunks)
        feed.done = page.done
        if not feed.done:
            self._feeds[task_id] = feed
            feed.reader = asyncio.get_running_loop().create_task(self._run(feed, page.cursor))
        return feed

    async def _run(self, feed: _Feed, cursor: int) -> None:
        try:
            while feed.followers:
                page = await self._read(feed.task_id, cursor)
                feed.chunks.extend(page.chunks)
                cursor, feed.done = page.cursor, page.done
                feed.tell()
                if feed.done:
                    return
                if not page.chunks:
                    await self._wait(feed.task_id, cursor)
        except Exception as error:  # the book failed: its followers raise it
            feed.error = error
        finally:
            if self._feeds.get(feed.task_id) is feed:
                del self._feeds[feed.task_id]
            feed.tell()
