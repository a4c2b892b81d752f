"""``ShardedRedisBook``: one namespace split into S shards, so it spreads over every
master of a Redis Cluster.

Each shard is a ``RedisBook`` of its own hash tag (``_keys.shard_tag``) holding its tasks
whole: their records, indexes, deadlines, outbox, stats and counters. A call about one
task goes to its shard (``_shards.ShardMap``), one script call as on one shard; callback
ids and idempotency keys stay global (``_claims``). A call that spans tasks asks every
shard and merges: reads run together, one pipeline per node (``_together``); writes that
span shards (batches, the sweep) run a shard per thread.
"""

from __future__ import annotations

import functools
import heapq
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any, TypeVar, Unpack

from .._book import ApplyItem, CreateOptions, CreateSpec, EventInput, HeldWrites, sort_notifications
from .._checks import require_limit, require_non_negative, require_page_cursor, require_state
from .._models import (
    STATE_NAMES,
    AsyncTask,
    AsyncTransition,
    CallbackResult,
    DeliveryResult,
    GroupNotification,
    Notification,
    ResumeResult,
    TaskPage,
)
from ..errors import AsyncBookError, DamagedRecordError, invalid
from . import _claims as claims
from . import _operations as operations
from ._args import number_text, utf8
from ._base import DEFAULT_RETENTION
from ._book import RedisBook
from ._changes import Change, follow_changes
from ._connection import reports_outages
from ._operations import BookLayout
from ._plan import Pipeline, Plan, command
from ._replies import text_of
from ._shards import ShardMap, fix_shard_count, require_shards
from ._together import run_together

__all__ = ["ShardedRedisBook"]

_T = TypeVar("_T")

_RELEASED_ON = ("invalid-request", "not-found", "damaged", "conflict")
"""The codes of an apply that surely wrote nothing: its claim is released."""

_TAKEN_CHECKS = 20
"""How often a claim held by another task without its marker is read again (every
``_TAKEN_PAUSE`` s) before the id is taken as that task's."""
_TAKEN_PAUSE = 0.01

_ENTRY_SEPARATOR = "/"
"""A sharded stream entry id: ``<shard>/<entry id>``."""


class ShardedRedisBook(RedisBook):
    """A ``RedisBook`` of S shards (``RedisBook(..., shards=S)``, S > 1): the same calls
    and answers, its tasks spread over S hash tags."""

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
    ) -> None:
        total = require_shards(shards)
        super().__init__(
            client,
            namespace=namespace,
            retention_versions=retention_versions,
            retention=retention,
            wait_replicas=wait_replicas,
            wait_timeout_ms=wait_timeout_ms,
        )
        self.shards = total
        """How many shards the namespace has."""
        self.map = ShardMap(namespace, total)
        self.books = [
            RedisBook(
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
        """One ``RedisBook`` per shard, in shard order."""
        self._count_fixed = False
        self._pool: ThreadPoolExecutor | None = None
        self._pool_pid = 0
        self._pool_lock = threading.Lock()

    # -- which shard ----------------------------------------------------------------

    def shard_of(self, task_id: Any) -> RedisBook:
        """The shard holding ``task_id`` (shard 0 for a value that is no id: it raises
        there, naming the field)."""
        if not isinstance(task_id, str):
            return self.books[0]
        return self.books[self.map.index_of(task_id)]

    def shard_map(self) -> dict[str, list[int]]:
        """Which node holds which shards: ``host:port`` -> shard indexes (one entry on a
        single Redis)."""
        nodes: dict[str, list[int]] = {}
        for index, book in enumerate(self.books):
            kwargs = book.engine.slot_client().connection_pool.connection_kwargs
            where = f"{kwargs.get('host') or kwargs.get('path')}:{kwargs.get('port', '')}"
            nodes.setdefault(where, []).append(index)
        return nodes

    def _fix_count(self) -> None:
        if not self._count_fixed:
            fix_shard_count(self.client, self.namespace, self.shards)
            self._count_fixed = True

    def _together(
        self, plans: Sequence[Plan[_T]], books: Sequence[RedisBook] | None = None
    ) -> list[_T]:
        engines = [book.engine for book in (self.books if books is None else books)]
        return run_together(engines, plans)

    def _each(
        self, call: Callable[[RedisBook], _T], books: Sequence[RedisBook] | None = None
    ) -> list[_T]:
        """``call`` on each shard, a thread each (writes: each waits for its own node)."""
        chosen = list(self.books if books is None else books)
        if len(chosen) == 1:
            return [call(chosen[0])]
        return list(self._executor().map(call, chosen))

    def _executor(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None or self._pool_pid != os.getpid():
                self._pool = ThreadPoolExecutor(
                    max_workers=min(8, self.shards), thread_name_prefix="asyncbook-shards"
                )
                self._pool_pid = os.getpid()
            return self._pool

    # -- the server ---------------------------------------------------------------

    def check_server(self) -> str | None:
        """Each shard's server check, and the namespace's shard count stored or checked."""
        self._fix_count()
        policies = sorted({p for book in self.books if (p := book.check_server()) is not None})
        return policies[0] if policies else None

    # -- creating and reading ---------------------------------------------------------

    @reports_outages
    def create(self, **options: Unpack[CreateOptions]) -> AsyncTask:
        self._fix_count()
        return self.shard_of(options.get("id")).create(**options)

    @reports_outages
    def create_many(self, specs: Iterable[CreateSpec]) -> list[AsyncTask | AsyncBookError]:
        self._fix_count()
        given = list(specs)
        by_shard: dict[int, list[int]] = {}
        for at, spec in enumerate(given):
            index = self.map.index_of(spec.id) if isinstance(spec.id, str) else 0
            by_shard.setdefault(index, []).append(at)
        out: list[AsyncTask | AsyncBookError | None] = [None] * len(given)
        shards = list(by_shard)

        def create(book: RedisBook) -> list[AsyncTask | AsyncBookError]:
            return book.create_many([given[at] for at in by_shard[self.books.index(book)]])

        for index, results in zip(
            shards, self._each(create, [self.books[i] for i in shards]), strict=True
        ):
            for at, result in zip(by_shard[index], results, strict=True):
                out[at] = result
        return [result for result in out if result is not None]

    def create_sender(self) -> None:  # type: ignore[override]
        """None: a sharded book writes its creates at once (a publisher's creates go
        to many nodes)."""
        return None

    @reports_outages
    def get(self, id: str) -> AsyncTask | None:
        return self.shard_of(id).get(id)

    # -- applying events --------------------------------------------------------------

    def _crosses(self, task_id: Any, identifier: Any) -> bool:
        """Whether ``identifier`` (a callback id, an idempotency key) lives in another
        shard than ``task_id``."""
        return (
            isinstance(task_id, str)
            and isinstance(identifier, str)
            and identifier != ""
            and self.map.home_index(identifier) != self.map.index_of(task_id)
        )

    def _claim(self, task_id: str, identifier: str) -> claims.Claim:
        """Claim a callback id for ``task_id`` in its home shard (``_claims``)."""
        home = self.books[self.map.home_index(identifier)]
        for _ in range(_TAKEN_CHECKS):
            found, holder = home.engine.run(
                claims.claim(home.keys, identifier, task_id, home.layout.retention_ms)
            )
            if found != claims.Claim.TAKEN or holder == "":
                return found
            holder_shard = self.shard_of(holder)
            if holder_shard.engine.run(claims.is_marked(holder_shard.keys, identifier)):
                return found
            threading.Event().wait(_TAKEN_PAUSE)
        return claims.Claim.TAKEN

    def _release(self, task_id: str, identifier: str) -> None:
        home = self.books[self.map.home_index(identifier)]
        home.engine.run(claims.release(home.keys, identifier, task_id))

    def _claimed(self, task_id: str, identifier: str, call: Callable[[bool], _T]) -> _T:
        """``call(taken)`` with ``identifier`` claimed for ``task_id``; a claim made here
        is released when the call surely wrote nothing."""
        found = self._claim(task_id, identifier)
        if found == claims.Claim.TAKEN:
            return call(True)
        try:
            return call(False)
        except AsyncBookError as error:
            if found == claims.Claim.NEW and error.code in _RELEASED_ON:
                self._release(task_id, identifier)
            raise

    @reports_outages
    def apply(
        self, task_id: str, event: EventInput, callback_id: str | None = None
    ) -> CallbackResult:
        self._fix_count()
        book = self.shard_of(task_id)
        if not self._crosses(task_id, callback_id):
            return book.apply(task_id, event, callback_id)
        assert callback_id is not None
        return self._claimed(
            task_id,
            callback_id,
            lambda taken: book.engine.run(
                operations.apply(book.layout, task_id, event, callback_id, taken=taken)
            ),
        )

    @reports_outages
    def cancel(
        self,
        task_id: str,
        reason: str | None = None,
        *,
        at_ms: int | float | None = None,
        callback_id: str | None = None,
        actor: str | None = None,
    ) -> CallbackResult:
        self._fix_count()
        book = self.shard_of(task_id)
        if not self._crosses(task_id, callback_id):
            return book.cancel(task_id, reason, at_ms=at_ms, callback_id=callback_id, actor=actor)
        assert callback_id is not None

        def cancel(taken: bool) -> CallbackResult:
            if not taken:
                return book.cancel(
                    task_id, reason, at_ms=at_ms, callback_id=callback_id, actor=actor
                )
            plan = operations.cancel(book.layout, task_id, reason, at_ms, callback_id, taken=True)
            answer = book.engine.run(plan)
            if actor is not None:
                book.record_audit(task_id, "cancel", actor, reason, answer.reason)
            return answer

        return self._claimed(task_id, callback_id, cancel)

    @reports_outages
    def expire(self, task_id: str) -> AsyncTransition:
        self._fix_count()
        return self.shard_of(task_id).expire(task_id)

    @reports_outages
    def apply_many(
        self, items: Iterable[ApplyItem], *, full_task: bool = True
    ) -> list[CallbackResult | AsyncBookError]:
        """``apply_many`` on each shard (a thread each); an event whose callback id lives
        in another shard is claimed there first (``_claims``)."""
        self._fix_count()
        given = [tuple(item) for item in items]
        out: list[CallbackResult | AsyncBookError | None] = [None] * len(given)
        by_shard: dict[int, list[int]] = {}
        claimed: dict[int, claims.Claim] = {}
        for at, item in enumerate(given):
            task_id = item[0]
            callback = item[2] if len(item) > 2 else None
            if self._crosses(task_id, callback):
                found = self._claim(task_id, callback)  # type: ignore[arg-type]
                if found == claims.Claim.TAKEN:
                    book = self.shard_of(task_id)
                    try:
                        out[at] = book.engine.run(
                            operations.apply(book.layout, task_id, item[1], callback, taken=True)  # type: ignore[arg-type]
                        )
                    except AsyncBookError as error:
                        out[at] = error
                    continue
                claimed[at] = found
            index = self.map.index_of(task_id) if isinstance(task_id, str) else 0
            by_shard.setdefault(index, []).append(at)
        shards = list(by_shard)

        def apply(book: RedisBook) -> list[CallbackResult | AsyncBookError]:
            index = self.books.index(book)
            return book.apply_many([given[at] for at in by_shard[index]], full_task=full_task)  # type: ignore[misc]

        for index, results in zip(
            shards, self._each(apply, [self.books[i] for i in shards]), strict=True
        ):
            for at, result in zip(by_shard[index], results, strict=True):
                out[at] = result
                if (
                    isinstance(result, AsyncBookError)
                    and claimed.get(at) == claims.Claim.NEW
                    and result.code in _RELEASED_ON
                ):
                    self._release(given[at][0], given[at][2])  # type: ignore[arg-type]
        return [result for result in out if result is not None]

    @reports_outages
    def expire_many(
        self, task_ids: Iterable[str], *, full_task: bool = True
    ) -> list[AsyncTransition | AsyncBookError]:
        self._fix_count()
        ids = list(task_ids)
        by_shard: dict[int, list[int]] = {}
        for at, task_id in enumerate(ids):
            index = self.map.index_of(task_id) if isinstance(task_id, str) else 0
            by_shard.setdefault(index, []).append(at)
        out: list[AsyncTransition | AsyncBookError | None] = [None] * len(ids)
        shards = list(by_shard)

        def expire(book: RedisBook) -> list[AsyncTransition | AsyncBookError]:
            index = self.books.index(book)
            return book.expire_many([ids[at] for at in by_shard[index]], full_task=full_task)

        for index, results in zip(
            shards, self._each(expire, [self.books[i] for i in shards]), strict=True
        ):
            for at, result in zip(by_shard[index], results, strict=True):
                out[at] = result
        return [result for result in out if result is not None]

    # -- reconnecting and delivering ----------------------------------------------------

    @reports_outages
    def resume(self, task_id: str, cursor_version: int, *, full_task: bool = True) -> ResumeResult:
        return self.shard_of(task_id).resume(task_id, cursor_version, full_task=full_task)

    @reports_outages
    def deliver_result(
        self, task_id: str, idempotency_key: str, now_ms: int | float
    ) -> DeliveryResult:
        """The task read in its shard first (a succeeded task never changes), then the
        key decided in its home shard (``_claims``)."""
        self._fix_count()
        book = self.shard_of(task_id)
        if not self._crosses(task_id, idempotency_key) or not idempotency_key.strip():
            return book.deliver_result(task_id, idempotency_key, now_ms)
        key = utf8(idempotency_key, "idempotencyKey")
        now = require_non_negative(now_ms, "nowMs")
        task_id = utf8(task_id, "taskId")
        damaged: str | None = None
        try:
            task = book.get(task_id)
        except DamagedRecordError as error:
            task, damaged = None, error.message
        home = self.books[self.map.home_index(key)]
        home.engine.before_write()
        reply = home.engine.run(
            claims.deliver_known(home.layout, key, task, damaged, number_text(now))
        )
        return operations.delivery_of(task_id, reply)

    # -- notifications ------------------------------------------------------------------

    @reports_outages
    def drain_notifications(self) -> list[Notification]:
        notes = [note for book in self.books for note in book.drain_notifications()]
        return sort_notifications(notes)

    @reports_outages
    def consume_notifications(
        self,
        group: str,
        consumer: str,
        count: int = 100,
        block_ms: int | None = None,
        min_idle_ms: int = 60_000,
    ) -> list[tuple[str, Notification]]:
        """Each shard's stream read through the group (up to ``count`` in all); entry
        ids are ``<shard>/<id>``. Blocks only when no shard had an entry."""
        return self._consume(
            lambda book, n, block: book.consume_notifications(
                group, consumer, n, block, min_idle_ms
            ),
            count,
            block_ms,
        )

    def _consume(
        self,
        read: Callable[[RedisBook, int, int | None], list[tuple[str, _T]]],
        count: int,
        block_ms: int | None,
    ) -> list[tuple[str, _T]]:
        limit = require_limit(count, "count")
        out: list[tuple[str, _T]] = []
        for index, book in enumerate(self.books):
            if len(out) >= limit:
                break
            for entry_id, note in read(book, limit - len(out), None):
                out.append((f"{index}{_ENTRY_SEPARATOR}{entry_id}", note))
        if out or block_ms is None:
            return out
        # Nothing now: wait on each shard in turn for a slice of block_ms.
        share = max(1, int(block_ms) // self.shards)
        for index, book in enumerate(self.books):
            found = read(book, limit, share)
            if found:
                return [(f"{index}{_ENTRY_SEPARATOR}{entry_id}", note) for entry_id, note in found]
        return out

    def _ack(
        self, entry_ids: tuple[str, ...], ack: Callable[[RedisBook, tuple[str, ...]], int]
    ) -> int:
        by_shard: dict[int, list[str]] = {}
        for entry in entry_ids:
            index, separator, entry_id = str(entry).partition(_ENTRY_SEPARATOR)
            if not separator or not index.isdigit() or int(index) >= self.shards:
                raise invalid(f"entry id {entry!r} is not <shard>/<id>", field="entryIds")
            by_shard.setdefault(int(index), []).append(entry_id)
        return sum(ack(self.books[index], tuple(ids)) for index, ids in by_shard.items())

    @reports_outages
    def ack(self, group: str, *entry_ids: str) -> int:
        return self._ack(entry_ids, lambda book, ids: book.ack(group, *ids))

    @reports_outages
    def drain_group_notifications(self) -> list[GroupNotification]:
        return [note for book in self.books for note in book.drain_group_notifications()]

    @reports_outages
    def consume_group_notifications(
        self,
        group: str,
        consumer: str,
        count: int = 100,
        block_ms: int | None = None,
        min_idle_ms: int = 60_000,
    ) -> list[tuple[str, GroupNotification]]:
        return self._consume(
            lambda book, n, block: book.consume_group_notifications(
                group, consumer, n, block, min_idle_ms
            ),
            count,
            block_ms,
        )

    @reports_outages
    def ack_group_notifications(self, group: str, *entry_ids: str) -> int:
        return self._ack(entry_ids, lambda book, ids: book.ack_group_notifications(group, *ids))

    # -- indexes ------------------------------------------------------------------------

    @reports_outages
    def overdue(self, now_ms: int | float, limit: int = 1000) -> list[str]:
        """Every shard's overdue ids merged, earliest deadline first."""
        now = require_non_negative(now_ms, "nowMs")
        count = require_limit(limit, maximum=1_000_000)
        rows = self._together([_deadline_rows(book.layout, now, count) for book in self.books])
        merged = heapq.merge(*rows, key=lambda row: (row[1], row[0]))
        return [task_id for task_id, _ in list(merged)[:count]]

    @reports_outages
    def overdue_count(self, now_ms: int | float) -> int:
        now = require_non_negative(now_ms, "nowMs")
        return sum(
            self._together([operations.overdue_count(book.layout, now) for book in self.books])
        )

    @reports_outages
    def list_tasks(
        self,
        state: str | None = None,
        limit: int = 50,
        after: str | None = None,
        *,
        full_task: bool = True,
    ) -> TaskPage:
        """Every shard's page merged by creation order (unique across shards).

        Each shard is asked first for a few rows per state (twice its share of the
        page, and 2); a shard is asked again for a whole page only when a list of it
        was cut above the page's last row (its unread rows could belong on the page).
        So a merge reads about twice the page's rows per state, not S pages."""
        wanted = require_state(state)
        count = require_limit(limit)
        cursor = require_page_cursor(after)
        states = STATE_NAMES if wanted is None else (wanted,)
        top = "+inf" if cursor is None else f"({cursor}"
        first = min(count + 1, 2 * -(-(count + 1) // self.shards) + 2)
        pages = self._together(
            [_newest_rows(book.layout, states, top, first) for book in self.books]
        )
        if first <= count:
            pages = self._complete(pages, states, top, count)
        rows = sorted(
            (
                (score, index, raw_id)
                for index, page in enumerate(pages)
                for raw_id, score in page[0]
            ),
            key=lambda row: -row[0],
        )
        more = len(rows) > count
        rows = rows[:count]
        if not rows:
            return TaskPage(tasks=())
        wanted_ids: dict[int, list[Any]] = {}
        for _score, index, raw_id in rows:
            wanted_ids.setdefault(index, []).append(raw_id)
        shards = list(wanted_ids)
        found = self._together(
            [operations.tasks_of(self.books[i].layout, wanted_ids[i], full_task) for i in shards],
            [self.books[i] for i in shards],
        )
        by_id = {task.id: task for tasks in found for task in tasks}
        tasks = tuple(by_id[text_of(raw_id)] for _s, _i, raw_id in rows if text_of(raw_id) in by_id)
        return TaskPage(tasks=tasks, next_after=str(int(rows[-1][0])) if more else None)

    def _complete(
        self, pages: list[_Rows], states: Sequence[str], top: str, count: int
    ) -> list[_Rows]:
        """``pages`` with every shard read again in full (``count`` + 1 rows per state)
        whose unread rows could rank among the first ``count`` + 1 of the merge."""
        scores = sorted((score for rows, _ in pages for _, score in rows), reverse=True)
        last = scores[count] if len(scores) > count else float("-inf")
        again = [i for i, (_, bound) in enumerate(pages) if bound is not None and bound > last]
        if not again:
            return pages
        full = self._together(
            [_newest_rows(self.books[i].layout, states, top, count + 1) for i in again],
            [self.books[i] for i in again],
        )
        out = list(pages)
        for index, rows in zip(again, full, strict=True):
            out[index] = rows
        return out

    @reports_outages
    def heartbeat(self, task_ids: Iterable[str]) -> int:
        ids = list(task_ids)
        by_shard: dict[int, list[str]] = {}
        for task_id in ids:
            index = self.map.index_of(task_id) if isinstance(task_id, str) else 0
            by_shard.setdefault(index, []).append(task_id)
        return sum(self.books[index].heartbeat(group) for index, group in by_shard.items())

    @reports_outages
    def end_stalled(
        self, now_ms: int | float | None = None, limit: int = 1000
    ) -> list[CallbackResult | AsyncBookError]:
        now = self.now_ms() if now_ms is None else require_non_negative(now_ms, "nowMs")
        found = self._each(lambda book: book.end_stalled(now, limit))
        return [result for results in found for result in results]

    @reports_outages
    def last_cursor(self, task_id: str) -> str | None:
        return self.shard_of(task_id).last_cursor(task_id)

    @reports_outages
    def count_by_state(self) -> dict[str, int]:
        counts = self._together([operations.count_by_state(book.layout) for book in self.books])
        return {state: sum(each[state] for each in counts) for state in STATE_NAMES}

    @reports_outages
    def transition_counts(self) -> dict[str, int]:
        counts = self._together([operations.transition_counts(book.layout) for book in self.books])
        total: dict[str, int] = {}
        for each in counts:
            for reason, n in each.items():
                total[reason] = total.get(reason, 0) + n
        return total

    def each_shard(self, call: Callable[[RedisBook], _T]) -> list[_T]:
        """``call`` on each shard's own book: the shards of one node in turn, the nodes
        at once (a thread each); the answers in shard order. The sweep expires each
        shard's due tasks this way (``asyncbook.sweep``): one call at a time per node,
        and no more threads than nodes contending for the interpreter."""
        nodes = list(self.shard_map().values())
        if len(nodes) == 1:
            return [call(book) for book in self.books]

        def in_turn(indexes: list[int]) -> list[tuple[int, _T]]:
            return [(index, call(self.books[index])) for index in indexes]

        answers = dict(pair for pairs in self._executor().map(in_turn, nodes) for pair in pairs)
        return [answers[index] for index in range(self.shards)]

    @reports_outages
    def prune(self, limit: int = 1000) -> int:
        """Each shard's ``prune`` (a thread each)."""
        return sum(self._each(lambda book: book.prune(limit)))

    # -- capabilities -------------------------------------------------------------------

    def wait_for_writes(self, writes: HeldWrites) -> None:
        for book in self.books:
            book.wait_for_writes(writes)

    @property
    def change_channels(self) -> list[str]:
        """Every shard's changes channel."""
        return [book.keys.changes_channel for book in self.books]

    def watch_cancels(
        self,
        on_cancel: Callable[[str], None],
        *,
        on_subscribe: Callable[[], None],
        stop: Callable[[], bool],
    ) -> Callable[[], None]:
        """``follow_changes`` on every shard's cancels channel."""

        def on_change(change: Change) -> None:
            if change.state == "cancelled":
                on_cancel(change.task_id)

        channels = [book.keys.cancels_channel for book in self.books]
        return functools.partial(
            follow_changes, self.client, channels, on_change, on_subscribe, stop=stop
        )

    def async_twin(self) -> None:
        """None: no asyncio twin of a sharded book yet."""
        return None

    def script_beside(self, client: object, source: str) -> None:
        """None: a sharded book's events are not fused with a caller's script."""
        return None


def _deadline_rows(book: BookLayout, now: float, count: int) -> Plan[list[tuple[str, float]]]:
    rows = yield command(
        "zrangebyscore", book.keys.deadlines, "-inf", now, start=0, num=count, withscores=True
    )
    return [(text_of(raw), float(score)) for raw, score in rows]


_Rows = tuple[list[tuple[Any, float]], float | None]
"""One shard's rows of a page (id, creation order), and the highest creation order its
unread rows may have (None: it has none unread)."""


def _newest_rows(book: BookLayout, states: Sequence[str], top: str, per: int) -> Plan[_Rows]:
    """Up to ``per`` rows of each state's index below ``top``, newest first."""
    pages = yield Pipeline(
        [
            command(
                "zrevrangebyscore",
                book.keys.state_index(state),
                top,
                "-inf",
                start=0,
                num=per,
                withscores=True,
            )
            for state in states
        ]
    )
    # A list cut at ``per`` rows may hold more below its last row.
    cut = [rows[-1][1] for rows in pages if len(rows) >= per]
    rows = sorted((row for rows in pages for row in rows), key=lambda row: -row[1])
    return rows, max(cut) if cut else None


RedisBook.sharded_type = ShardedRedisBook
