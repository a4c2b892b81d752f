"""``Reader``: how the status server reads its book, awaited on its event loop.

A ``RedisBook`` is read through an ``AsyncRedisBook`` on an asyncio client like the
book's (``AsyncRedisBook.twin_of``): the same plans, no threads. Any other book is wrapped in
``SyncReader``: a ``MemoryBook`` is called in place (it does no I/O); a book whose
client has no asyncio twin (a Cluster, Sentinel, fakeredis, a book of your own) on a few
threads. Either way the server's handlers and streams have one implementation.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Protocol, TypeVar

import anyio
import anyio.to_thread

from .._book import AsyncBook
from .._console import NameTotals, SearchPage, TaskInfo, TaskQuery, TaskStats, WorkerSummary
from .._memory import MemoryBook
from .._models import (
    AsyncTask,
    CallbackResult,
    DeliveryResult,
    GroupSummary,
    ResumeResult,
    TaskPage,
)
from ..redis import AsyncRedisBook, RedisBook

__all__ = ["BOOK_THREADS", "BookThreads", "Reader", "SyncReader", "close_reader", "reader_for"]

BOOK_THREADS = 4
_T = TypeVar("_T")

RunSync = Callable[..., Awaitable[Any]]
"""Runs ``fn(*args)`` of a sync book and hands back its answer."""


class Reader(Protocol):
    """The book's calls the status server makes, awaited."""

    retention_versions: int

    async def get(self, id: str) -> AsyncTask | None: ...

    async def resume(
        self, task_id: str, cursor_version: int, *, full_task: bool = True
    ) -> ResumeResult: ...

    async def list_tasks(
        self,
        state: str | None = None,
        limit: int = 50,
        after: str | None = None,
        *,
        full_task: bool = True,
    ) -> TaskPage: ...

    async def group(self, group_id: str) -> GroupSummary | None: ...

    async def group_members(self, group_id: str, limit: int = 100) -> list[AsyncTask]: ...

    async def deliver_result(
        self, task_id: str, idempotency_key: str, now_ms: int | float
    ) -> DeliveryResult: ...

    async def cancel(self, task_id: str, reason: str | None = None) -> CallbackResult: ...

    async def overdue(self, now_ms: int | float, limit: int = 1000) -> list[str]: ...

    async def overdue_count(self, now_ms: int | float) -> int: ...

    async def last_sweep_ms(self) -> int | None: ...

    async def now_ms(self) -> int: ...

    async def count_by_state(self) -> dict[str, int]: ...

    async def transition_counts(self) -> dict[str, int]: ...

    async def info(self, task_id: str) -> TaskInfo | None: ...

    async def search(self, query: TaskQuery, /) -> SearchPage: ...

    async def workers(self, within_ms: int = 86_400_000) -> list[WorkerSummary]: ...

    async def stats(
        self, name: str | None = None, window_ms: int = 3_600_000, now_ms: int | None = None
    ) -> TaskStats: ...

    async def task_names(self) -> list[str]: ...

    async def name_totals(self) -> list[NameTotals]: ...


class BookThreads:
    """Runs blocking book calls off the event loop, on at most ``size`` threads at once.

    A book call is one short Redis round trip: a few threads keep a core busy, and more
    only fight over the GIL (50 clients on 40 threads made every lookup slower).
    """

    def __init__(self, size: int = BOOK_THREADS) -> None:
        self.size = size
        self._limiter: anyio.CapacityLimiter | None = None

    async def __call__(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(self.size)
        return await anyio.to_thread.run_sync(fn, *args, limiter=self._limiter)


async def _in_place(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


class SyncReader:
    """A sync book read through ``run_sync`` (each call is handed to it)."""

    def __init__(self, book: Any, run_sync: RunSync) -> None:
        self.book = book
        self.retention_versions: int = book.retention_versions
        self._run_sync = run_sync

    async def _call(self, fn: Callable[[], _T]) -> _T:
        answer: _T = await self._run_sync(fn)
        return answer

    async def get(self, id: str) -> AsyncTask | None:
        return await self._call(partial(self.book.get, id))

    async def resume(
        self, task_id: str, cursor_version: int, *, full_task: bool = True
    ) -> ResumeResult:
        return await self._call(
            partial(self.book.resume, task_id, cursor_version, full_task=full_task)
        )

    async def list_tasks(
        self,
        state: str | None = None,
        limit: int = 50,
        after: str | None = None,
        *,
        full_task: bool = True,
    ) -> TaskPage:
        return await self._call(
            partial(self.book.list_tasks, state, limit, after, full_task=full_task)
        )

    async def group(self, group_id: str) -> GroupSummary | None:
        return await self._call(partial(self.book.group, group_id))

    async def group_members(self, group_id: str, limit: int = 100) -> list[AsyncTask]:
        return await self._call(partial(self.book.group_members, group_id, limit))

    async def deliver_result(
        self, task_id: str, idempotency_key: str, now_ms: int | float
    ) -> DeliveryResult:
        return await self._call(partial(self.book.deliver_result, task_id, idempotency_key, now_ms))

    async def cancel(self, task_id: str, reason: str | None = None) -> CallbackResult:
        return await self._call(partial(self.book.cancel, task_id, reason))

    async def overdue(self, now_ms: int | float, limit: int = 1000) -> list[str]:
        return await self._call(partial(self.book.overdue, now_ms, limit))

    async def overdue_count(self, now_ms: int | float) -> int:
        return await self._call(partial(self.book.overdue_count, now_ms))

    async def last_sweep_ms(self) -> int | None:
        return await self._call(self.book.last_sweep_ms)

    async def now_ms(self) -> int:
        return await self._call(self.book.now_ms)

    async def count_by_state(self) -> dict[str, int]:
        return await self._call(self.book.count_by_state)

    async def transition_counts(self) -> dict[str, int]:
        return await self._call(self.book.transition_counts)

    async def info(self, task_id: str) -> TaskInfo | None:
        return await self._call(partial(self.book.info, task_id))

    async def search(self, query: TaskQuery, /) -> SearchPage:
        return await self._call(partial(self.book.search, query))

    async def workers(self, within_ms: int = 86_400_000) -> list[WorkerSummary]:
        return await self._call(partial(self.book.workers, within_ms))

    async def stats(
        self, name: str | None = None, window_ms: int = 3_600_000, now_ms: int | None = None
    ) -> TaskStats:
        return await self._call(partial(self.book.stats, name, window_ms, now_ms))

    async def task_names(self) -> list[str]:
        return await self._call(self.book.task_names)

    async def name_totals(self) -> list[NameTotals]:
        return await self._call(self.book.name_totals)

    async def aclose(self) -> None:
        """Nothing to close: the book is the caller's."""


def reader_for(book: AsyncBook | Reader, run_sync: RunSync | None = None) -> Reader:
    """How the server reads ``book``: itself when it is read awaited already (an
    ``AsyncRedisBook``, a ``Reader``); else an ``AsyncRedisBook`` twin of a ``RedisBook``
    (unless ``run_sync`` is given); else ``SyncReader`` with ``run_sync`` (default: in
    place for a ``MemoryBook``, ``BookThreads`` for any other book)."""
    if isinstance(book, AsyncRedisBook | SyncReader):
        return book
    if run_sync is None and isinstance(book, RedisBook):
        twin = AsyncRedisBook.twin_of(book)
        if twin is not None:
            return twin
    if run_sync is None:
        run_sync = _in_place if isinstance(book, MemoryBook) else BookThreads()
    return SyncReader(book, run_sync)


async def close_reader(reader: Reader, book: object) -> None:
    """Close the twin ``reader_for`` opened for ``book`` (never a book the caller gave)."""
    if reader is not book and isinstance(reader, AsyncRedisBook):
        await reader.aclose()
