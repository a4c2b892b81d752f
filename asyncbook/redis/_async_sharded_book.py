"""``AsyncShardedRedisBook``: ``ShardedRedisBook``'s asyncio twin.

It holds one ``AsyncRedisBook`` per shard (``shard=(k, S)``) on one client: a call about
one task is awaited on its shard, a read that spans tasks asks every shard at once
(``asyncio.gather``) and merges as ``ShardedRedisBook`` does, and callback ids and
idempotency keys that live in another shard are claimed there first (``_claims``).
The console's namespace-wide reads and groups run the sync book's merged plans
(``_merged``), their shards' plans awaited at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from .._audit import AuditEntry
from .._checks import (
    require_limit,
    require_non_negative,
    require_text,
)
from .._console import NameTotals, SearchPage, TaskInfo, TaskQuery, TaskStats, WorkerSummary
from .._gauges import GAUGE_WORKERS_WITHIN_MS, BookGauges
from .._jsrules import is_blank
from .._models import (
    STATE_NAMES,
    AsyncTask,
    CallbackResult,
    DeliveryResult,
    GroupSummary,
    ResumeResult,
    TaskPage,
)
from ..errors import AsyncBookError, DamagedRecordError
from . import _claims as claims
from . import _operations as operations
from . import _sharded_console as console
from . import _sharded_groups as groups
from . import _sharded_lists as lists
from ._args import number_text, utf8
from ._async_book import AsyncRedisBook
from ._base import DEFAULT_RETENTION
from ._connection import reports_outages_async
from ._merged import MergedPlan, OnShards, drive_async
from ._shard import Shard
from ._shards import CountCheck, HomeRule, ShardMap, prefix_home, require_shards

__all__ = ["AsyncShardedRedisBook"]

_T = TypeVar("_T")

_RELEASED_ON = ("invalid-request", "damaged", "conflict")
"""The codes of a cancel that surely wrote nothing: its claim is released."""

_TAKEN_CHECKS = 20
_TAKEN_PAUSE = 0.01
"""As ``ShardedRedisBook``: a claim held by another task without its marker is read again
this often, this far apart, before the id is taken as that task's."""


class AsyncShardedRedisBook(AsyncRedisBook):
    """An ``AsyncRedisBook`` of S shards (``AsyncRedisBook(..., shards=S)``, S > 1): the
    same calls and answers as ``ShardedRedisBook``, awaited."""

    sharded = True

    def __init__(
        self,
        client: Any,
        *,
        namespace: str = "asyncbook",
        retention_versions: int = 8,
        retention: timedelta | None = DEFAULT_RETENTION,
        wait_replicas: int = 0,
        wait_timeout_ms: int = 1000,
        shards: int,
        home_of: HomeRule = prefix_home,
    ) -> None:
        total = require_shards(shards)
        super().__init__(
            client,
            namespace=namespace,
            retention_versions=retention_versions,
            retention=retention,
            wait_replicas=wait_replicas,
            wait_timeout_ms=wait_timeout_ms,
            home_of=home_of,
        )
        self.shards = total
        """How many shards the namespace has."""
        self.map = ShardMap(namespace, total, home_of)
        self.shard_check = CountCheck(namespace, total)
        self.books = [
            AsyncRedisBook(
                client,
                namespace=namespace,
                retention_versions=retention_versions,
                retention=retention,
                wait_replicas=wait_replicas,
                wait_timeout_ms=wait_timeout_ms,
                shard=(index, total),
            )
            for index in range(total)
        ]
        """One ``AsyncRedisBook`` per shard, in shard order (sharing this book's client)."""
        for book in self.books:
            book.shard_check = self.shard_check  # one check of the namespace's count

    # -- which shard ----------------------------------------------------------------

    def shard_of(self, task_id: Any) -> AsyncRedisBook:
        """The shard holding ``task_id`` (shard 0 for a value that is no id: it raises
        there, naming the field)."""
        if not isinstance(task_id, str):
            return self.books[0]
        return self.books[self.map.index_of(task_id)]

    async def _fix_count(self) -> None:
        await self.shard_check.fix_async(self.client)

    async def _each(
        self,
        call: Callable[[AsyncRedisBook], Awaitable[_T]],
        books: Sequence[AsyncRedisBook] | None = None,
    ) -> list[_T]:
        """``call`` on each shard, all at once; their answers in shard order."""
        return list(await asyncio.gather(*(call(book) for book in books or self.books)))

    def _crosses(self, task_id: Any, identifier: Any) -> bool:
        """Whether ``identifier`` (a callback id, an idempotency key) lives in another
        shard than ``task_id``. Every text is an id, the empty one included: global, as
        the reference's ``callbackId !== undefined``."""
        return (
            isinstance(task_id, str)
            and isinstance(identifier, str)
            and self.map.home_index(identifier) != self.map.index_of(task_id)
        )

    async def check_server(self, *, reading: bool = False) -> str | None:
        """Each shard's server check, and the namespace's shard count stored or checked
        (only checked when ``reading``, as ``ShardedRedisBook.check_server``)."""
        if reading:
            await self.shard_check.check_async(self.client)
        else:
            await self._fix_count()
        found = await self._each(lambda book: book.check_server())
        policies = sorted({policy for policy in found if policy is not None})
        return policies[0] if policies else None

    # -- reads --------------------------------------------------------------------------

    @reports_outages_async
    async def get(self, id: str) -> AsyncTask | None:
        return await self.shard_of(id).get(id)

    @reports_outages_async
    async def resume(
        self, task_id: str, cursor_version: int, *, full_task: bool = True
    ) -> ResumeResult:
        return await self.shard_of(task_id).resume(task_id, cursor_version, full_task=full_task)

    @reports_outages_async
    async def info(self, task_id: str) -> TaskInfo | None:
        return await self.shard_of(task_id).info(task_id)

    @reports_outages_async
    async def list_tasks(
        self,
        state: str | None = None,
        limit: int = 50,
        after: str | None = None,
        *,
        full_task: bool = True,
    ) -> TaskPage:
        """Every shard's page merged by creation order (``_sharded_lists.newest_page``)."""
        return await self._merged(lists.newest_page(self._layouts, state, limit, after, full_task))

    @reports_outages_async
    async def overdue(self, now_ms: int | float, limit: int = 1000) -> list[str]:
        """Every shard's overdue ids merged, earliest deadline first."""
        now = require_non_negative(now_ms, "nowMs")
        count = require_limit(limit, maximum=1_000_000)
        return await self._merged(lists.overdue(self._layouts, now, count))

    @reports_outages_async
    async def overdue_count(self, now_ms: int | float) -> int:
        now = require_non_negative(now_ms, "nowMs")
        return sum(await self._each(lambda book: book.overdue_count(now)))

    @reports_outages_async
    async def count_by_state(self) -> dict[str, int]:
        counts = await self._each(lambda book: book.count_by_state())
        return {state: sum(each[state] for each in counts) for state in STATE_NAMES}

    @reports_outages_async
    async def transition_counts(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for each in await self._each(lambda book: book.transition_counts()):
            for reason, n in each.items():
                total[reason] = total.get(reason, 0) + n
        return total

    # -- client-side writes -------------------------------------------------------------

    async def _claim(self, task_id: str, identifier: str) -> claims.Claim:
        """Claim a callback id for ``task_id`` in its home shard (``_claims``)."""
        home = self.books[self.map.home_index(identifier)]
        for _ in range(_TAKEN_CHECKS):
            found, holder = await home.engine.run(
                claims.claim(home.keys, identifier, task_id, home.layout.retention_ms)
            )
            if found != claims.Claim.TAKEN or holder == "":
                return found
            holder_shard = self.shard_of(holder)
            if await holder_shard.engine.run(claims.is_marked(holder_shard.keys, identifier)):
                return found
            await asyncio.sleep(_TAKEN_PAUSE)
        return claims.Claim.TAKEN

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
        """The cancel in the task's shard, then the group check that follows a member's
        end (``_sharded_groups.check``, as ``ShardedRedisBook`` runs it)."""
        result = await self._cancel_in_shard(
            task_id, reason, at_ms=at_ms, callback_id=callback_id, actor=actor
        )
        await self._after_ends(self.shard_of(task_id), [result], [task_id])
        return result

    async def _after_ends(
        self, book: AsyncRedisBook, results: Sequence[Any], task_ids: Sequence[str]
    ) -> None:
        """The group check after members ended: each group once."""
        for group_id, at_ms in groups.ended_groups(book, results, task_ids).items():
            home = self.map.index_of(group_id)
            await self._merged(groups.check(self._layouts, group_id, home, at_ms))

    async def _cancel_in_shard(
        self,
        task_id: str,
        reason: str | None = None,
        *,
        at_ms: int | float | None = None,
        callback_id: str | None = None,
        actor: str | None = None,
    ) -> CallbackResult:
        await self._fix_count()
        book = self.shard_of(task_id)
        if not self._crosses(task_id, callback_id):
            return await book.cancel(
                task_id, reason, at_ms=at_ms, callback_id=callback_id, actor=actor
            )
        assert callback_id is not None
        found = await self._claim(task_id, callback_id)
        if found == claims.Claim.TAKEN:
            plan = operations.cancel(book.layout, task_id, reason, at_ms, callback_id, taken=True)
            answer = await book.engine.run(plan)
            if actor is not None:
                await book.record_audit(task_id, "cancel", actor, reason, answer.reason)
            return answer
        try:
            return await book.cancel(
                task_id, reason, at_ms=at_ms, callback_id=callback_id, actor=actor
            )
        except AsyncBookError as error:
            if found == claims.Claim.NEW and error.code in _RELEASED_ON:
                home = self.books[self.map.home_index(callback_id)]
                await home.engine.run(claims.release(home.keys, callback_id, task_id))
            raise

    @reports_outages_async
    async def deliver_result(
        self, task_id: str, idempotency_key: str, now_ms: int | float
    ) -> DeliveryResult:
        """The task read in its shard first, then the key decided in its home shard."""
        await self._fix_count()
        book = self.shard_of(task_id)
        if not self.map.key_crosses(task_id, idempotency_key) or is_blank(idempotency_key):
            return await book.deliver_result(task_id, idempotency_key, now_ms)
        key = utf8(idempotency_key, "idempotencyKey")
        now = require_non_negative(now_ms, "nowMs")
        task_id = utf8(task_id, "taskId")
        damaged: str | None = None
        try:
            task = await book.get(task_id)
        except DamagedRecordError as error:
            task, damaged = None, error.message
        home = self.books[self.map.key_index(key)]
        await home.engine.run(operations.before_write(home.layout))
        reply = await home.engine.run(
            claims.deliver_known(home.layout, key, task, damaged, number_text(now))
        )
        return operations.delivery_of(task_id, reply)

    @reports_outages_async
    async def record_audit(
        self, task_id: str, action: str, actor: str, reason: str | None, outcome: str
    ) -> None:
        await self._fix_count()
        await self.shard_of(task_id).record_audit(task_id, action, actor, reason, outcome)

    @reports_outages_async
    async def audit(
        self, task_id: str | None = None, *, since_ms: int | float | None = None, limit: int = 100
    ) -> list[AuditEntry]:
        """A task's audit entries, or every shard's log merged, newest first."""
        if task_id is None:
            return await self._merged(console.audit(self._layouts, since_ms, limit))
        return await self.shard_of(task_id).audit(task_id, since_ms=since_ms, limit=limit)

    # -- waiting and following ----------------------------------------------------------

    def follow(self, task_id: str, cursor: int = 0) -> AsyncGenerator[ResumeResult, None]:
        """``AsyncRedisBook.follow`` on the task's shard (its changes channel)."""
        return self.shard_of(task_id).follow(task_id, cursor)

    # -- merged reads (``_merged``: the sync book's merges, awaited) ---------------------

    @property
    def _layouts(self) -> list[Shard]:
        return [book.layout for book in self.books]

    async def _merged(self, plan: MergedPlan[_T]) -> _T:
        """A merged read, its shards' plans awaited at once."""

        async def on_shards(asked: OnShards) -> list[Any]:
            books = self.books if asked.shards is None else [self.books[i] for i in asked.shards]
            runs = (book.engine.run(each) for book, each in zip(books, asked.plans, strict=True))
            return list(await asyncio.gather(*runs))

        return await drive_async(plan, on_shards)

    @reports_outages_async
    async def group(self, group_id: str) -> GroupSummary | None:
        group = utf8(require_text(group_id, "groupId"), "groupId")
        return await self._merged(groups.summary(self._layouts, group, self.map.index_of(group)))

    @reports_outages_async
    async def group_members(self, group_id: str, limit: int = 100) -> list[AsyncTask]:
        """Every shard's members merged in creation order."""
        group = utf8(require_text(group_id, "groupId"), "groupId")
        count = require_limit(limit, maximum=10_000)
        return await self._merged(groups.members(self._layouts, group, count))

    @reports_outages_async
    async def search(self, query: TaskQuery | None = None, /, **filters: Any) -> SearchPage:
        """Every shard's page merged in the query's order (``_sharded_console``)."""
        given = TaskQuery(**filters) if query is None else query
        return await self._merged(console.search(self._layouts, given))

    @reports_outages_async
    async def workers(self, within_ms: int = 86_400_000) -> list[WorkerSummary]:
        return await self._merged(console.workers(self._layouts, within_ms))

    @reports_outages_async
    async def stats(
        self, name: str | None = None, window_ms: int = 3_600_000, now_ms: int | None = None
    ) -> TaskStats:
        """Every shard's stats summed; percentiles from the summed runtime buckets."""
        return await self._merged(console.stats(self._layouts, name, window_ms, now_ms))

    @reports_outages_async
    async def task_names(self, within_ms: int | None = None) -> list[str]:
        return await self._merged(console.task_names(self._layouts, within_ms))

    @reports_outages_async
    async def name_totals(self) -> list[NameTotals]:
        return await self._merged(console.name_totals(self._layouts))

    @reports_outages_async
    async def gauges(self, now_ms: int, within_ms: int = GAUGE_WORKERS_WITHIN_MS) -> BookGauges:
        """Every shard's gauges merged (``_sharded_console.gauges``)."""
        return await self._merged(console.gauges(self._layouts, now_ms, within_ms))


AsyncRedisBook.sharded_type = AsyncShardedRedisBook
