"""``Reader``: how the status server reads its book, awaited on its event loop.

A Redis book is read through its asyncio twin (``async_twin()``: an ``AsyncRedisBook`` on
a client like the book's, on every layout: plain Redis, a Cluster, a Sentinel's master,
fakeredis; the same plans, no threads). An ``AsyncRedisBook`` is its own twin. A book
with no twin (a ``MemoryBook``: it does no I/O) is called in place, through
``InPlaceReader``. Either way the server's handlers and streams have one implementation.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar, cast, runtime_checkable

from .._audit import AuditedBook
from .._book import AsyncBook
from .._console import NameTotals, SearchPage, TaskInfo, TaskQuery, TaskStats, WorkerSummary
from .._gauges import GAUGE_WORKERS_WITHIN_MS, BookGauges
from .._models import CallbackResult
from .._output import OutputChunk
from .._output_feed import OutputFeeds
from ..errors import AsyncBookError
from ..redis import AsyncRedisBook, KeySchema

__all__ = [
    "ConsoleBook",
    "InPlaceReader",
    "OnRedis",
    "Reader",
    "close_reader",
    "reader_for",
]

_T = TypeVar("_T")
POLL_MS = 50
"""How long a follower of a book with no twin pauses before reading its output again."""
_P = ParamSpec("_P")


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


@runtime_checkable
class OnRedis(Protocol):
    """A reader on a Redis client: its client and its (first shard's) key schema, where
    the server keeps what it keeps beside the book (the sessions)."""

    client: Any
    keys: KeySchema


def _awaited(
    method: Callable[Concatenate[Any, _P], _T],
) -> Callable[Concatenate[InPlaceReader, _P], Coroutine[Any, Any, _T]]:
    """The sync book's ``method``, called through the reader's ``call`` and awaited: its
    signature is the book protocol's, written once there."""
    name = method.__name__

    async def call(reader: InPlaceReader, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        answer: _T = await reader.call(getattr(reader.book, name), *args, **kwargs)
        return answer

    call.__name__ = call.__qualname__ = name
    call.__doc__ = method.__doc__
    return call


class InPlaceReader:
    """A book with no asyncio twin (a ``MemoryBook``), read awaited: each call runs in
    place, on the server's loop (such a book does no I/O: nothing to wait for)."""

    def __init__(self, book: Any) -> None:
        self.book = book
        self.retention_versions: int = book.retention_versions
        self._feeds: OutputFeeds | None = None

    async def call(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
        """``fn(*args, **kwargs)``, answered in place."""
        return fn(*args, **kwargs)

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
    output = _awaited(AsyncBook.output)
    info = _awaited(ConsoleBook.info)
    search = _awaited(ConsoleBook.search)
    workers = _awaited(ConsoleBook.workers)
    stats = _awaited(ConsoleBook.stats)
    task_names = _awaited(ConsoleBook.task_names)
    name_totals = _awaited(ConsoleBook.name_totals)
    audit = _awaited(AuditedBook.audit)
    record_audit = _awaited(AuditedBook.record_audit)

    async def cancel_many(
        self, task_ids: list[str], *, actor: str, reason: str | None = None
    ) -> list[CallbackResult | AsyncBookError]:
        """The book's ``cancel_many`` (``MemoryBook``'s); a book without one cancels each
        task on its own (the same answers: ``AsyncBook.cancel`` with ``actor``)."""
        many = getattr(self.book, "cancel_many", None)
        if many is not None:
            return cast(
                list[CallbackResult | AsyncBookError], many(task_ids, actor=actor, reason=reason)
            )
        answers: list[CallbackResult | AsyncBookError] = []
        for task_id in task_ids:
            try:
                answers.append(self.book.cancel(task_id, reason, actor=actor))
            except AsyncBookError as error:
                answers.append(error)
        return answers

    def follow_output(
        self, task_id: str, cursor: int | str = 0
    ) -> AsyncGenerator[OutputChunk, None]:
        """``AsyncRedisBook.follow_output``, its reader pausing between reads."""
        if self._feeds is None:
            self._feeds = OutputFeeds(
                lambda task, at: self.output(task, at),
                lambda task, at: self.wait_output(task, at, POLL_MS),
            )
        return self._feeds.follow(task_id, cursor)

    async def wait_output(self, task_id: str, cursor: int, wait_ms: int) -> bool:
        """A pause of at most ``POLL_MS`` (a book with no twin has nothing to wait on):
        False, read again."""
        await asyncio.sleep(min(wait_ms, POLL_MS) / 1000)
        return False

    async def gauges(
        self, now_ms: int, within_ms: int = GAUGE_WORKERS_WITHIN_MS
    ) -> BookGauges | None:
        """None: a book with no twin has no streams nor workers to read."""
        return None

    async def check_server(self, *, reading: bool = False) -> str | None:
        """None: a book with no twin has no server to check."""
        return None

    def async_twin(self) -> InPlaceReader:
        """Itself: it is read awaited already."""
        return self

    async def aclose(self) -> None:
        """Nothing to close: the book is the caller's."""


Reader = AsyncRedisBook | InPlaceReader
"""The book's calls the status server makes, awaited: an ``AsyncRedisBook``, or a book
with no twin behind an ``InPlaceReader`` (``reader_for`` gives one or the other)."""


def reader_for(book: AsyncBook | Reader) -> Reader:
    """How the server reads ``book``: its asyncio twin (``async_twin()``: a Redis book's
    ``AsyncRedisBook``; a reader, an ``AsyncRedisBook``, is its own), else in place
    (``InPlaceReader``)."""
    twin = book.async_twin()
    if twin is None:
        return InPlaceReader(book)
    # The protocol's twin is an awaited book of the same calls (``AsyncBook.async_twin``).
    return cast(Reader, twin)


async def close_reader(reader: Reader, book: object) -> None:
    """Close the twin ``reader_for`` opened for ``book`` (never a book the caller gave)."""
    if reader is not book:
        await reader.aclose()
