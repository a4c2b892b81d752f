"""``AsyncRedisBook``: the book on ``redis.asyncio``, for asyncio apps (FastAPI, the
status server).

The same surface as ``RedisBook`` (``_surface`` holds both to one table), awaited: each
method runs the same namespace plan (``_task_ops``, ``_reads``) on the asyncio driver
(``_async_book_driver``), so both books send the same script calls and give the same answers
and errors, on one shard or many. ``wait`` and ``follow`` are driven by the task's shard's
change channel; nothing polls.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Iterable
from types import TracebackType
from typing import Any, Unpack

from .._audit import AuditEntry
from .._book import ApplyItem, CreateOptions, CreateSpec, EventInput
from .._console import NameTotals, SearchPage, TaskInfo, TaskQuery, TaskStats, WorkerSummary
from .._gauges import GAUGE_WORKERS_WITHIN_MS, BookGauges
from .._jsrules import is_finite_number
from .._models import (
    AsyncTask,
    AsyncTransition,
    CallbackResult,
    DeliveryResult,
    GroupNotification,
    GroupSummary,
    Notification,
    ResumeResult,
    TaskPage,
)
from ..errors import AsyncBookError, UnknownTaskError, invalid
from . import _groups as groups
from . import _operations as operations
from . import _outbox as outbox
from . import _reads as reads
from . import _task_ops as tasks
from ._async_book_driver import AsyncDriver
from ._async_changes import changes
from ._base import BookBase
from ._merged import FIX_COUNT, MergedPlan, on
from ._namespace import Namespace
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

    def _driver(self, client: Any, ns: Namespace) -> AsyncDriver:
        return AsyncDriver(client, ns)

    @classmethod
    def twin_of(cls, book: BookBase) -> AsyncRedisBook | None:
        """An async book of ``book``'s namespace, retention and shards, on an asyncio
        client like ``book.client`` (same server, db, credentials, TLS, timeouts; a
        Cluster's startup nodes, a Sentinel's service, fakeredis's ``FakeServer``); None
        when that client is of another make (``_twin.async_client_like``). Close it when
        done."""
        client = async_client_like(book.client)
        if client is None:
            return None
        return cls(
            client,
            namespace=book.namespace,
            retention_versions=book.retention_versions,
            retention=book.retention,
            wait_replicas=book.wait_replicas,
            wait_timeout_ms=book.wait_timeout_ms,
            shards=book.shards,
            home_of=book.home_of,
        )

    def async_twin(self) -> AsyncRedisBook:
        """Itself: it is read awaited already (the ``AsyncBook`` capability, for a caller
        that takes either book, as the status server does)."""
        return self

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
        """Check the book's server as ``RedisBook.check_server`` does: ``UnsupportedServerError``
        when it cannot run the book, a warning when it may evict; returns its
        ``maxmemory-policy``. ``reading``: the shard count is only checked, not stored."""
        if self.shards > 1 and not reading:
            await self.driver.run(_fix_count())
        found = await self.driver.run(reads.check_server(self.ns))
        policies = sorted({policy for policy in found if policy is not None})
        return policies[0] if policies else None

    # -- creating and reading -------------------------------------------------------

    async def create(self, **options: Unpack[CreateOptions]) -> AsyncTask:
        """Store a new queued task; an existing id is ``conflict`` unless ``exist_ok``.

        With ``heartbeat_timeout_ms`` a running attempt silent for that long is ended by
        ``end_stalled`` (retryable when ``retry_on_stall``). With ``group_id`` the task is
        a member of that group (``group``, ``seal_group``). ``info`` is kept for the
        console (``info``, ``search``, ``stats``); the task itself does not show it.
        """
        return await self.driver.run(tasks.create(self.ns, CreateSpec(**options)))

    async def create_many(self, specs: Iterable[CreateSpec]) -> list[AsyncTask | AsyncBookError]:
        """``create`` for each spec, in one pipelined round trip (each atomic on its own);
        a spec the book refuses answers its error in its place."""
        return await self.driver.run(tasks.create_many(self.ns, specs))

    async def get(self, id: str) -> AsyncTask | None:
        """The stored task with its history, or None."""
        return await self.driver.run(reads.get(self.ns, id))

    # -- applying events ---------------------------------------------------------------

    async def apply(
        self, task_id: str, event: EventInput, callback_id: str | None = None
    ) -> CallbackResult:
        """Apply one event; a callback id already recorded changes nothing."""
        return await self.driver.run(tasks.apply(self.ns, task_id, event, callback_id))

    async def cancel(
        self,
        task_id: str,
        reason: str | None = None,
        *,
        at_ms: int | float | None = None,
        callback_id: str | None = None,
        actor: str | None = None,
    ) -> CallbackResult:
        """Cancel a queued or running task (extension): ``apply`` of a ``cancel`` event.

        ``at_ms`` defaults to the Redis server's clock. With ``actor`` the cancel and its
        audit entry are one script call (``_audit``).
        """
        return await self.driver.run(
            tasks.cancel(self.ns, task_id, reason, at_ms, callback_id, actor)
        )

    async def audit(
        self, task_id: str | None = None, *, since_ms: int | float | None = None, limit: int = 100
    ) -> list[AuditEntry]:
        """Audit entries, newest first: the task's, or (no ``task_id``) the namespace's."""
        return await self.driver.run(reads.audit(self.ns, task_id, since_ms, limit))

    async def record_audit(
        self, task_id: str, action: str, actor: str, reason: str | None, outcome: str
    ) -> None:
        """Record a change another call made to an existing task (a retry of your own;
        ``Retrier`` records its retries itself): one entry."""
        await self.driver.run(tasks.record_audit(self.ns, task_id, action, actor, reason, outcome))

    async def expire(self, task_id: str) -> AsyncTransition:
        """Expire the task at its deadline, as the sweep does (notified at the deadline)."""
        return (await self.driver.run(tasks.expire(self.ns, task_id))).transition()

    async def apply_many(
        self, items: Iterable[ApplyItem], *, full_task: bool = True
    ) -> list[CallbackResult | AsyncBookError]:
        """Apply many events in one pipelined round trip, each atomic on its own.

        With ``full_task=False`` each result's task comes without its history (cheaper,
        for callers that only need the reasons, such as the sweep).
        """
        return await self.driver.run(tasks.apply_many(self.ns, items, full_task))

    async def expire_many(
        self, task_ids: Iterable[str], *, full_task: bool = True
    ) -> list[AsyncTransition | AsyncBookError]:
        """Expire many tasks at their deadlines: one script call per thousand (each
        expiry is ``expire``'s, atomic on its own)."""
        results = await self.driver.run(tasks.expire_many(self.ns, task_ids, full_task))
        return [r if isinstance(r, AsyncBookError) else r.transition() for r in results]

    # -- reconnecting and delivering ----------------------------------------------------

    async def resume(
        self, task_id: str, cursor_version: int, *, full_task: bool = True
    ) -> ResumeResult:
        """What changed after ``cursor_version``: caught-up, a delta, or a snapshot.

        With ``full_task=False`` a caught-up or delta answer carries the task without its
        history, so it costs O(events returned) however long the history is.
        """
        return await self.driver.run(tasks.resume(self.ns, task_id, cursor_version, full_task))

    async def deliver_result(
        self, task_id: str, idempotency_key: str, now_ms: int | float
    ) -> DeliveryResult:
        """Hand the result over once per idempotency key."""
        return await self.driver.run(
            tasks.deliver_result(self.ns, task_id, idempotency_key, now_ms)
        )

    # -- notifications (``_outbox``) ---------------------------------------------------

    async def drain_notifications(self) -> list[Notification]:
        """Every pending notification, sorted by task id then time; empties the outbox."""
        return await self.driver.run(reads.drain(self.ns, groups=False))

    async def consume_notifications(
        self,
        group: str,
        consumer: str,
        count: int = 100,
        block_ms: int | None = None,
        min_idle_ms: int = 60_000,
    ) -> list[tuple[str, Notification]]:
        """Read notifications at least once: acknowledge each with ``ack`` when handled.

        Entries another consumer read but never acknowledged for ``min_idle_ms`` are
        claimed first; then new entries. The group is created on first use.
        """
        reading = outbox.Reading(count, block_ms, min_idle_ms)
        return await self.driver.run(reads.consume(self.ns, False, group, consumer, reading))

    async def ack(self, group: str, *entry_ids: str) -> int:
        """Acknowledge handled notifications; returns how many were pending."""
        return await self.driver.run(reads.ack(self.ns, False, group, entry_ids))

    async def drain_group_notifications(self) -> list[GroupNotification]:
        """Every pending group notification, in order; empties their stream."""
        return await self.driver.run(reads.drain(self.ns, groups=True))

    async def consume_group_notifications(
        self,
        group: str,
        consumer: str,
        count: int = 100,
        block_ms: int | None = None,
        min_idle_ms: int = 60_000,
    ) -> list[tuple[str, GroupNotification]]:
        """Group notifications, at least once: acknowledge with ``ack_group_notifications``."""
        reading = outbox.Reading(count, block_ms, min_idle_ms)
        return await self.driver.run(reads.consume(self.ns, True, group, consumer, reading))

    async def ack_group_notifications(self, group: str, *entry_ids: str) -> int:
        """Acknowledge handled group notifications; returns how many were pending."""
        return await self.driver.run(reads.ack(self.ns, True, group, entry_ids))

    # -- indexes ------------------------------------------------------------------------

    async def overdue(self, now_ms: int | float, limit: int = 1000) -> list[str]:
        """Ids of live tasks whose deadline is at or before ``now_ms``, earliest first."""
        return await self.driver.run(reads.overdue(self.ns, now_ms, limit))

    async def overdue_count(self, now_ms: int | float) -> int:
        """How many live tasks have a deadline at or before ``now_ms`` (one ZCOUNT)."""
        return await self.driver.run(reads.overdue_count(self.ns, now_ms))

    async def record_sweep(self, at_ms: int | float) -> None:
        """Note that a sweep ran at ``at_ms`` (kept without expiry: one small key)."""
        await self.driver.run(on(0, operations.record_sweep(self.layout, at_ms)))

    async def last_sweep_ms(self) -> int | None:
        """When a sweep last ran, or None if none ever did."""
        return await self.driver.run(on(0, operations.last_sweep_ms(self.layout), writes=False))

    async def claim_sweep(self, owner: str, lease_ms: int) -> bool:
        """Take the namespace's sweep lease for ``lease_ms`` if nobody holds it, or renew it
        if ``owner`` does (``SET NX PX GET``): True if ``owner`` may sweep now. A holder
        that stops renewing (it died) is replaced once its lease lapses."""
        return await self.driver.run(on(0, operations.claim_sweep(self.layout, owner, lease_ms)))

    async def list_tasks(
        self,
        state: str | None = None,
        limit: int = 50,
        after: str | None = None,
        *,
        full_task: bool = True,
    ) -> TaskPage:
        """Tasks, newest first, optionally in one state; ``after`` continues a page.

        With ``full_task=False`` the listed tasks come without their histories (the
        listing then reads no history at all).
        """
        return await self.driver.run(reads.list_tasks(self.ns, state, limit, after, full_task))

    async def heartbeat(self, task_ids: Iterable[str]) -> int:
        """Say that these tasks' running attempts are alive: one round trip for them all."""
        return await self.driver.run(tasks.heartbeat(self.ns, task_ids))

    async def end_stalled(
        self, now_ms: int | float | None = None, limit: int = 1000
    ) -> list[CallbackResult | AsyncBookError]:
        """Fail every running task whose heartbeat is overdue (by the server's clock).

        The script checks again, atomically, that the task is still overdue, so a
        heartbeat that arrives meanwhile wins; each fail carries a callback id naming the
        stall, so two sweeps fail a task once.
        """
        return await self.driver.run(tasks.end_stalled(self.ns, now_ms, limit))

    async def last_cursor(self, task_id: str) -> str | None:
        """The cursor of the last progress the task reported (its checkpoint), or None."""
        return await self.driver.run(reads.last_cursor(self.ns, task_id))

    async def seal_group(self, group_id: str, total: int) -> GroupSummary:
        """Declare that ``group_id`` has ``total`` members: once they have all ended, one
        group notification (at once if they already have)."""
        return await self.driver.run(tasks.seal_group(self.ns, group_id, total))

    async def group(self, group_id: str) -> GroupSummary | None:
        """The group's counts by state and its progress: one round trip, O(1)."""
        return await self.driver.run(groups.summary(self.ns, group_id))

    async def group_members(self, group_id: str, limit: int = 100) -> list[AsyncTask]:
        """The group's members in creation order (without histories), up to ``limit``."""
        return await self.driver.run(groups.members(self.ns, group_id, limit))

    async def now_ms(self) -> int:
        """The Redis server's clock (TIME): one clock for every worker, beat and client."""
        return await self.driver.run(reads.now_ms(self.ns))

    # -- the operator console -------------------------------------------------------

    async def info(self, task_id: str) -> TaskInfo | None:
        """A task's info (Celery name, arguments, queue, worker, times, traceback), or
        None when the book does not hold the task."""
        return await self.driver.run(reads.info(self.ns, task_id))

    async def search(self, query: TaskQuery | None = None, /, **filters: Any) -> SearchPage:
        """One page of tasks matching a ``TaskQuery`` (or its fields as keywords: name,
        state, worker, q, since_ms, until_ms, sort, limit, after), with totals per state."""
        given = TaskQuery(**filters) if query is None else query
        return await self.driver.run(reads.search(self.ns, given))

    async def workers(self, within_ms: int = 86_400_000) -> list[WorkerSummary]:
        """Workers seen in the last ``within_ms``, most recently seen first."""
        return await self.driver.run(reads.workers(self.ns, within_ms))

    async def stats(
        self, name: str | None = None, window_ms: int = 3_600_000, now_ms: int | None = None
    ) -> TaskStats:
        """Per-minute starts, ends by state and runtime percentiles of one task name (None:
        every task) over the last ``window_ms`` (one minute to a day): one round trip."""
        return await self.driver.run(reads.stats(self.ns, name, window_ms, now_ms))

    async def task_names(self, within_ms: int | None = None) -> list[str]:
        """Task names the book has seen (created within ``within_ms``), sorted."""
        return await self.driver.run(reads.task_names(self.ns, within_ms))

    async def name_totals(self) -> list[NameTotals]:
        """Running totals per task name, for Prometheus counters and histograms."""
        return await self.driver.run(reads.name_totals(self.ns))

    async def gauges(self, now_ms: int, within_ms: int = GAUGE_WORKERS_WITHIN_MS) -> BookGauges:
        """What ``/metrics`` reads beyond the counts: the notification streams, their
        consumer groups and the workers seen (``_gauges``), in one round trip."""
        return await self.driver.run(reads.gauges(self.ns, now_ms, within_ms))

    async def count_by_state(self) -> dict[str, int]:
        """How many tasks each state index holds (one pipelined round trip)."""
        return await self.driver.run(reads.count_by_state(self.ns))

    async def transition_counts(self) -> dict[str, int]:
        """How many times each reason was answered, by every client of this book."""
        return await self.driver.run(reads.transition_counts(self.ns))

    async def prune(self, limit: int = 1000) -> int:
        """Drop index entries of ended tasks whose records expired; returns how many.

        Looks at up to ``limit`` entries per index (each terminal state's, each task
        name's, each worker's and each sort index), in index order, resuming where the previous call
        stopped, so regular calls (the sweep makes one per pass) visit every entry in turn.
        """
        if self.retention is None:
            return 0
        return await self.driver.run(reads.prune(self.ns, limit))

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


def _fix_count() -> MergedPlan[None]:
    yield FIX_COUNT
