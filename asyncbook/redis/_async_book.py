"""``AsyncRedisBook``: the book on ``redis.asyncio``, for asyncio apps (FastAPI, the
status server): ``RedisBook``'s table (``_surface``) awaited on the asyncio driver, so both
books send the same script calls. ``wait`` and ``follow`` are driven by the task's shard's
change channel; nothing polls.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from types import TracebackType

from .._jsrules import is_finite_number
from .._models import AsyncTask, ResumeResult
from .._output import OutputChunk
from .._output_feed import OutputFeeds
from ..errors import UnknownTaskError, invalid
from ._base import BookBase
from ._book_driver import AsyncDriver
from ._changes import changes
from ._twin import async_client_like

__all__ = ["AsyncRedisBook"]


class AsyncRedisBook(BookBase):
    """A ``RedisBook`` for asyncio, on a ``redis.asyncio`` client: the same calls,
    answers and errors, awaited.

    ``async with AsyncRedisBook.from_url(url, namespace=...) as book:``; give it the
    namespace (and shard count) the workers write (``install(app)``'s).
    """

    asyncio = True
    driver: AsyncDriver
    _output_feeds: OutputFeeds | None = None

    @classmethod
    def twin_of(cls, book: BookBase) -> AsyncRedisBook | None:
        """An async book made with ``book``'s settings, on an asyncio client like
        ``book.client`` (same server, db, credentials, TLS, timeouts: ``_twin``); None
        when that client is of another make. Close it when done."""
        client = async_client_like(book.client)
        return None if client is None else cls(client, **book.options)

    def async_twin(self) -> AsyncRedisBook:
        """Itself: it is read awaited already (the ``AsyncBook`` capability, for a caller
        that takes either book, as the status server does)."""
        return self

    async def aclose(self) -> None:
        """Close the client's connections (a Sentinel-managed master's: its sentinels'
        too)."""
        await self.client.aclose()
        pool = getattr(self.client, "connection_pool", None)
        manager = getattr(pool, "sentinel_manager", None)
        for sentinel in getattr(manager, "sentinels", ()):
            await sentinel.aclose()

    async def __aenter__(self) -> AsyncRedisBook:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def check_server(self, *, reading: bool = False) -> str | None:
        """``RedisBook.check_server``, awaited (without its log of the shards' nodes)."""
        return await self.driver.run(self._server_check(reading))

    # -- waiting and following ----------------------------------------------------------

    async def follow(self, task_id: str, cursor: int = 0) -> AsyncGenerator[ResumeResult, None]:
        """The task's versions after ``cursor`` as they are written, until it is terminal.

        Each item is a resume from the last version yielded (a ``delta`` of the new
        history entries, or a ``snapshot`` when too far behind; a delta's task comes
        without its history). Driven by the task's shard's change channel: a change of the
        task, or a (re)subscribe after a lost link, triggers a resume, so no version is
        skipped or repeated. Ends after the terminal version (at once when ``cursor`` is
        already there); ``UnknownTaskError`` for an id the book does not hold.
        """
        seen = cursor  # checked by the first resume, as ``resume`` checks it
        feed = changes(self.client, self.ns.shard_of(task_id).keys.changes_channel)
        async with contextlib.aclosing(feed):
            async for change in feed:
                if change is not None and (change.task_id != task_id or change.version <= seen):
                    continue
                result = await self.resume(task_id, seen, full_task=False)
                if result.task.version > seen:
                    seen = result.task.version
                    yield result
                if result.task.terminal:
                    return

    output_wait_ms = 1000
    """How long an output follower's wait blocks before the task's state is read again."""

    def follow_output(
        self, task_id: str, cursor: int | str = 0
    ) -> AsyncGenerator[OutputChunk, None]:
        """The task's output chunks after ``cursor`` as they are appended, until the task
        has ended and its last chunk was yielded; resume with the last chunk's ``seq``
        (no gap, no repeat). The followers of a task in this book share one reader
        (``OutputFeeds``), which waits on the task's stream between reads (a blocking
        XREAD of ``output_wait_ms``)."""
        if self._output_feeds is None:
            self._output_feeds = OutputFeeds(
                lambda task, at: self.output(task, at),
                lambda task, at: self.wait_output(task, at, self.output_wait_ms),
            )
        return self._output_feeds.follow(task_id, cursor)

    async def wait(self, task_id: str, timeout: float) -> AsyncTask:
        """The task (with its history) once it is terminal; ``TimeoutError`` naming the
        task after ``timeout`` seconds, ``UnknownTaskError`` for an unknown id."""
        if not is_finite_number(timeout) or timeout <= 0:
            raise invalid("timeout must be a number of seconds > 0", field="timeout")
        limit = asyncio.timeout(timeout)
        try:
            async with limit:
                task = await self.get(task_id)
                if task is not None and not task.terminal:
                    async with contextlib.aclosing(self.follow(task_id, task.version)) as versions:
                        async for _version in versions:
                            pass
                    task = await self.get(task_id)
                if task is None:
                    raise UnknownTaskError(task_id)
        except TimeoutError:
            if not limit.expired():
                raise
            raise TimeoutError(
                f"task {task_id!r} did not reach a terminal state within {timeout} s"
            ) from None
        return task
