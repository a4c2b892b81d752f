"""``AsyncRedisBook``: the book's reads and client-side writes on ``redis.asyncio``.

For asyncio apps (FastAPI, the status server): its ``AsyncEngine`` runs the very plans
``RedisBook``'s ``Engine`` runs (``_operations``, ``_console``), so both books send the
same script calls and give the same answers and errors. ``wait`` and ``follow`` are
driven by the book's change channel; nothing polls.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from types import TracebackType
from typing import Any, ClassVar, Self

from .._audit import AuditEntry
from .._console import NameTotals, SearchPage, TaskInfo, TaskQuery, TaskStats, WorkerSummary
from .._gauges import GAUGE_WORKERS_WITHIN_MS, BookGauges
from .._jsrules import is_finite_number
from .._models import (
    AsyncTask,
    CallbackResult,
    DeliveryResult,
    GroupSummary,
    ResumeResult,
    TaskPage,
)
from ..errors import UnknownTaskError, invalid
from . import _audit as audits
from . import _console, _stats
from . import _operations as operations
from ._async_changes import changes
from ._async_engine import AsyncEngine
from ._base import BookBase
from ._connection import reports_outages_async
from ._gauges import gauges
from ._plan import server_time
from ._twin import async_client_like

__all__ = ["AsyncRedisBook"]


class AsyncRedisBook(BookBase):
    """A ``RedisBook``'s reads and client-side writes for asyncio, on a ``redis.asyncio``
    client: the same answers and errors, awaited.

    ``async with AsyncRedisBook.from_url(url, namespace=...) as book:``; give it the
    namespace the workers write (``install(app)``'s).
    """

    engine_type = AsyncEngine
    engine: AsyncEngine
    sharded_type: ClassVar[type[AsyncRedisBook] | None] = None
    """``AsyncShardedRedisBook``, which ``AsyncRedisBook(..., shards=S)`` builds for S > 1
    (set where it is defined, so that this module does not import it)."""

    def __new__(cls, *args: Any, shards: int = 1, **settings: Any) -> Self:
        if cls is AsyncRedisBook and shards != 1 and cls.sharded_type is not None:
            return super().__new__(cls.sharded_type)  # type: ignore[return-value]
        return super().__new__(cls)

    @classmethod
    def twin_of(cls, book: BookBase) -> AsyncRedisBook | None:
        """An async book of ``book``'s namespace, retention and shards, on an asyncio
        client like ``book.client`` (same address, db, credentials, TLS, timeouts); None
        when that client has no such twin (a Cluster, Sentinel, fakeredis...). Close it
        when done."""
        client = async_client_like(book.client)
        if client is None:
            return None
        settings: dict[str, Any] = {
            "namespace": book.namespace,
            "retention_versions": book.retention_versions,
            "retention": book.retention,
            "wait_replicas": book.wait_replicas,
            "wait_timeout_ms": book.wait_timeout_ms,
            "home_of": book.home_of,
        }
        shards: int = getattr(book, "shards", 1)  # a ShardedRedisBook's
        if book.sharded:
            return cls(client, shards=shards, **settings)
        return cls(client, shard=book.shard, **settings)

    async def aclose(self) -> None:
        """Close the client's connections."""
        await self.client.aclose()

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
        """Check the book's server as ``RedisBook.check_server`` does (once per book, at
        the first write): ``UnsupportedServerError`` when it cannot run the book, a
        warning when it may evict; returns its ``maxmemory-policy``. ``reading``: as
        ``RedisBook.check_server``."""
        return await self.engine.run(operations.check_server(self.layout))

    # -- reads --------------------------------------------------------------------------

    @reports_outages_async
    async def get(self, id: str) -> AsyncTask | None:
        """The stored task with its history, or None."""
        return await self.engine.run(operations.get(self.layout, id))

    @reports_outages_async
    async def resume(
        self, task_id: str, cursor_version: int, *, full_task: bool = True
    ) -> ResumeResult:
        """What changed after ``cursor_version``: caught-up, a delta, or a snapshot."""
        return await self.engine.run(
            operations.resume(self.layout, task_id, cursor_version, full_task)
        )

    @reports_outages_async
    async def list_tasks(
        self,
        state: str | None = None,
        limit: int = 50,
        after: str | None = None,
        *,
        full_task: bool = True,
    ) -> TaskPage:
        """Tasks, newest first, optionally in one state; ``after`` continues a page."""
        return await self.engine.run(
            operations.list_tasks(self.layout, state, limit, after, full_task)
        )

    @reports_outages_async
    async def overdue(self, now_ms: int | float, limit: int = 1000) -> list[str]:
        """Ids of live tasks whose deadline is at or before ``now_ms``, earliest first."""
        return await self.engine.run(operations.overdue(self.layout, now_ms, limit))

    @reports_outages_async
    async def overdue_count(self, now_ms: int | float) -> int:
        """How many live tasks have a deadline at or before ``now_ms``."""
        return await self.engine.run(operations.overdue_count(self.layout, now_ms))

    @reports_outages_async
    async def last_sweep_ms(self) -> int | None:
        """When a sweep last ran, or None if none ever did."""
        return await self.engine.run(operations.last_sweep_ms(self.layout))

    @reports_outages_async
    async def group(self, group_id: str) -> GroupSummary | None:
        """The group's counts by state and its progress, or None."""
        return await self.engine.run(operations.group(self.layout, group_id))

    @reports_outages_async
    async def group_members(self, group_id: str, limit: int = 100) -> list[AsyncTask]:
        """The group's members in creation order (without histories), up to ``limit``."""
        return await self.engine.run(operations.group_members(self.layout, group_id, limit))

    @reports_outages_async
    async def now_ms(self) -> int:
        """The Redis server's clock (TIME)."""
        return await self.engine.run(server_time())

    @reports_outages_async
    async def count_by_state(self) -> dict[str, int]:
        """How many tasks each state index holds."""
        return await self.engine.run(operations.count_by_state(self.layout))

    @reports_outages_async
    async def transition_counts(self) -> dict[str, int]:
        """How many times each reason was answered, by every client of this book."""
        return await self.engine.run(operations.transition_counts(self.layout))

    # -- the operator console -----------------------------------------------------------

    @reports_outages_async
    async def info(self, task_id: str) -> TaskInfo | None:
        """A task's info (Celery name, arguments, queue, worker, times, traceback), or
        None when the book does not hold the task."""
        return await self.engine.run(_console.info(self.layout, task_id))

    @reports_outages_async
    async def search(self, query: TaskQuery | None = None, /, **filters: Any) -> SearchPage:
        """One page of tasks matching a ``TaskQuery`` (or its fields as keywords)."""
        given = TaskQuery(**filters) if query is None else query
        return await self.engine.run(_console.search(self.layout, given))

    @reports_outages_async
    async def workers(self, within_ms: int = 86_400_000) -> list[WorkerSummary]:
        """Workers seen in the last ``within_ms``, most recently seen first."""
        return await self.engine.run(_console.workers(self.layout, within_ms))

    @reports_outages_async
    async def stats(
        self, name: str | None = None, window_ms: int = 3_600_000, now_ms: int | None = None
    ) -> TaskStats:
        """Per-minute starts, ends and runtime percentiles of one task name (or all)."""
        return await self.engine.run(_stats.stats(self.layout, name, window_ms, now_ms))

    @reports_outages_async
    async def task_names(self, within_ms: int | None = None) -> list[str]:
        """Task names the book has seen (created within ``within_ms``), sorted."""
        return await self.engine.run(_console.task_names(self.layout, within_ms))

    @reports_outages_async
    async def name_totals(self) -> list[NameTotals]:
        """Running totals per task name, for Prometheus counters and histograms."""
        return await self.engine.run(_stats.name_totals(self.layout))

    @reports_outages_async
    async def gauges(self, now_ms: int, within_ms: int = GAUGE_WORKERS_WITHIN_MS) -> BookGauges:
        """The notification streams' lengths, their consumer groups' backlogs and the
        workers seen in the ``within_ms`` before ``now_ms``, for ``/metrics``: one round
        trip."""
        return await self.engine.run(gauges(self.layout, now_ms, within_ms))

    # -- client-side writes -------------------------------------------------------------

    @reports_outages_async
    async def deliver_result(
        self, task_id: str, idempotency_key: str, now_ms: int | float
    ) -> DeliveryResult:
        """Hand the result over once per idempotency key."""
        plan = operations.deliver_result(self.layout, task_id, idempotency_key, now_ms)
        return await self.engine.run(plan)

    @reports_outages_async
    async def cancel(
        self,
        task_id: str,
        reason: str | None = None,
        *,
        at_ms: int | float | None = None,
        callback_id: str | None = None,
        actor: str | None = None,
    ) -> CallbackResult:
        """Cancel a queued or running task; ``at_ms`` defaults to the server's clock.
        With ``actor`` the cancel is audited (``RedisBook.cancel``)."""
        plan = audits.cancel(self.layout, task_id, reason, at_ms, callback_id, actor)
        return await self.engine.run(plan)

    @reports_outages_async
    async def audit(
        self, task_id: str | None = None, *, since_ms: int | float | None = None, limit: int = 100
    ) -> list[AuditEntry]:
        """Audit entries, newest first (``RedisBook.audit``)."""
        return await self.engine.run(audits.read(self.layout, task_id, since_ms, limit))

    @reports_outages_async
    async def record_audit(
        self, task_id: str, action: str, actor: str, reason: str | None, outcome: str
    ) -> None:
        """Record a change another call made (``RedisBook.record_audit``)."""
        await self.engine.run(audits.record(self.layout, task_id, action, actor, reason, outcome))

    # -- waiting and following ----------------------------------------------------------

    async def follow(self, task_id: str, cursor: int = 0) -> AsyncGenerator[ResumeResult, None]:
        """The task's versions after ``cursor`` as they are written, until it is terminal.

        Each item is a resume from the last version yielded (a ``delta`` of the new
        history entries, or a ``snapshot`` when too far behind; a delta's task comes
        without its history). Driven by the change channel: a change of the task, or a
        (re)subscribe after a lost link, triggers a resume, so no version is skipped or
        repeated. Ends after the terminal version (at once when ``cursor`` is already
        there); ``UnknownTaskError`` for an id the book does not hold.
        """
        seen = cursor  # checked by the first resume, as ``resume`` checks it
        feed = changes(self.client, self.keys.changes_channel)
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

    async def wait(self, task_id: str, timeout: float) -> AsyncTask:
        """The task (with its history) once it is terminal; ``TimeoutError`` naming the
        task after ``timeout`` seconds, ``UnknownTaskError`` for an unknown id."""
        if not is_finite_number(timeout) or timeout <= 0:
            raise invalid("timeout must be a number of seconds > 0", field="timeout")
        limit = asyncio.timeout(timeout)
        try:
            async with limit:
                task = await self.get(task_id)
                if task is None:
                    raise UnknownTaskError(task_id)
                if not task.terminal:
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
