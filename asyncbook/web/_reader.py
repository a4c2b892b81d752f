"""``Reader``: how the status server reads its book, awaited on its event loop.

A ``RedisBook`` is read through an ``AsyncRedisBook`` on an asyncio client like the
book's (``AsyncRedisBook.twin_of``): the same plans, no threads. Any other book is wrapped in
``SyncReader``: a ``MemoryBook`` is called in place (it does no I/O); a book whose
client has no asyncio twin (a Cluster, Sentinel, fakeredis, a book of your own) on a few
threads. Either way the server's handlers and streams have one implementation.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar, runtime_checkable

import anyio
import anyio.to_thread

from .._audit import AuditedBook
from .._book import AsyncBook
from .._console import NameTotals, SearchPage, TaskInfo, TaskQuery, TaskStats, WorkerSummary
from .._gauges import GAUGE_WORKERS_WITHIN_MS, BookGauges
from .._memory import MemoryBook
from ..redis import AsyncRedisBook, RedisBook

__all__ = [
    "BOOK_THREADS",
    "BookThreads",
    "ConsoleBook",
    "Reader",
    "SyncReader",
    "close_reader",
    "reader_for",
]

BOOK_THREADS = 4
_T = TypeVar("_T")
_P = ParamSpec("_P")

RunSync = Callable[..., Awaitable[Any]]
"""Runs ``fn(*args)`` of a sync book and hands back its answer."""


@runtime_checkable
class ConsoleBook(Protocol):
    """A book that keeps task info, searches it, and counts per worker and per name."""

    def info(self, task_id: str) -> TaskInfo | None: ...

    def search(self, query: TaskQuery) -> SearchPage: ...

    def workers(self, within_ms: int = ...) -> list[WorkerSummary]: ...

    def stats(
        self, name: str | None = None, window_ms: int = ..., now_ms: int | None = None
    ) -> TaskStats: ...

    def task_names(self) -> list[str]: ...

    def name_totals(self) -> list[NameTotals]: ...


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


def _awaited(
    method: Callable[Concatenate[Any, _P], _T],
) -> Callable[Concatenate[SyncReader, _P], Coroutine[Any, Any, _T]]:
    """The sync book's ``method``, handed to the reader's ``run_sync`` and awaited: its
    signature is the book protocol's, written once there."""
    name = method.__name__

    async def call(reader: SyncReader, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        answer: _T = await reader.run_sync(partial(getattr(reader.book, name), *args, **kwargs))
        return answer

    call.__name__ = call.__qualname__ = name
    call.__doc__ = method.__doc__
    return call


class SyncReader:
    """A sync book read through ``run_sync`` (each call is handed to it)."""

    def __init__(self, book: Any, run_sync: RunSync) -> None:
        self.book = book
        self.retention_versions: int = book.retention_versions
        self.run_sync = run_sync

    get = _awaited(AsyncBook.get)
    resume = _awaited(AsyncBook.resume)
    list_tasks = _awaited(AsyncBook.list_tasks)
    group = _awaited(AsyncBook.group)
    group_members = _awaited(AsyncBook.group_members)
    deliver_result = _awaited(AsyncBook.deliver_result)
    cancel = _awaited(AsyncBook.cancel)
    overdue = _awaited(AsyncBook.overdue)
    overdue_count = _awaited(AsyncBook.overdue_count)
    last_sweep_ms = _awaited(AsyncBook.last_sweep_ms)
    now_ms = _awaited(AsyncBook.now_ms)
    count_by_state = _awaited(AsyncBook.count_by_state)
    transition_counts = _awaited(AsyncBook.transition_counts)
    info = _awaited(ConsoleBook.info)
    search = _awaited(ConsoleBook.search)
    workers = _awaited(ConsoleBook.workers)
    stats = _awaited(ConsoleBook.stats)
    task_names = _awaited(ConsoleBook.task_names)
    name_totals = _awaited(ConsoleBook.name_totals)
    audit = _awaited(AuditedBook.audit)
    record_audit = _awaited(AuditedBook.record_audit)

    async def gauges(
        self, now_ms: int, within_ms: int = GAUGE_WORKERS_WITHIN_MS
    ) -> BookGauges | None:
        """``RedisBook.gauges`` (one round trip; a sharded book's merged); None for any
        other book (it has no streams nor workers to read)."""
        book = self.book
        if not isinstance(book, RedisBook):
            return None
        answer: BookGauges = await self.run_sync(book.gauges, now_ms, within_ms)
        return answer

    async def aclose(self) -> None:
        """Nothing to close: the book is the caller's."""


Reader = AsyncRedisBook | SyncReader
"""The book's calls the status server makes, awaited: an ``AsyncRedisBook``, or a sync
book behind a ``SyncReader`` (``reader_for`` gives one or the other)."""


def reader_for(book: AsyncBook | Reader, run_sync: RunSync | None = None) -> Reader:
    """How the server reads ``book``: itself when it is read awaited already (an
    ``AsyncRedisBook``, a ``Reader``); else the book's asyncio twin, where it has one (a
    ``RedisBook``'s ``AsyncRedisBook``; unless ``run_sync`` is given); else ``SyncReader``
    with ``run_sync`` (default: in place for a ``MemoryBook``, ``BookThreads`` for any other
    book)."""
    if isinstance(book, AsyncRedisBook | SyncReader):
        return book
    if run_sync is None:
        twin = book.async_twin()  # a RedisBook's AsyncRedisBook; None for most other books
        if isinstance(twin, AsyncRedisBook):
            return twin
    if run_sync is None:
        run_sync = _in_place if isinstance(book, MemoryBook) else BookThreads()
    return SyncReader(book, run_sync)


async def close_reader(reader: Reader, book: object) -> None:
    """Close the twin ``reader_for`` opened for ``book`` (never a book the caller gave)."""
    if reader is not book and isinstance(reader, AsyncRedisBook):
        await reader.aclose()
