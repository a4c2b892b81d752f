"""``ShardedRedisBook``: one namespace split into S shards, so it spreads over every
master of a Redis Cluster.

Long because it is ``RedisBook``'s whole public surface again: one short method per
call, each routing to a shard or merging (the merges live in ``_merged``,
``_sharded_lists``, ``_sharded_console`` and ``_sharded_groups``).

Each shard is a ``RedisBook`` of its own hash tag (``_keys.shard_tag``) holding its tasks
whole: their records, indexes, deadlines, outbox, stats and counters. A call about one
task goes to its shard (``_shards.ShardMap``), one script call as on one shard; callback
ids and idempotency keys stay global (``_claims``). A call that spans tasks asks every
shard and merges: reads run together, one pipeline per node (``_together``); writes that
span shards (batches, the sweep) run a shard per thread.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any, TypeVar, Unpack

from .._audit import AuditEntry
from .._book import ApplyItem, CreateOptions, CreateSpec, EventInput, HeldWrites, sort_notifications
from .._checks import (
    require_limit,
    require_non_negative,
    require_text,
)
from .._console import NameTotals, SearchPage, TaskInfo, TaskQuery, TaskStats, WorkerSummary
from .._gauges import GAUGE_WORKERS_WITHIN_MS, BookGauges
from .._jsrules import is_blank
from .._models import (
    GROUP_END_STATES,
    STATE_NAMES,
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
from ..errors import AsyncBookError, DamagedRecordError, invalid
from . import _claims as claims
from . import _operations as operations
from . import _sharded_console as console
from . import _sharded_groups as groups
from . import _sharded_lists as lists
from ._args import number_text, utf8
from ._base import DEFAULT_RETENTION
from ._book import RedisBook
from ._changes import Change, follow_changes
from ._connection import reports_outages
from ._merged import MergedPlan, OnShards, drive
from ._plan import Plan
from ._scripts import BookScript, ScriptedEvents
from ._shard import Shard
from ._shards import CountCheck, HomeRule, ShardMap, prefix_home, require_shards
from ._together import run_together

__all__ = ["ShardedRedisBook"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

_RELEASED_ON = ("invalid-request", "damaged", "conflict")
"""The codes of an apply that surely wrote nothing: its claim is released."""

_TAKEN_CHECKS = 20
"""How often a claim held by another task without its marker is read again (every
``_TAKEN_PAUSE`` s) before the id is taken as that task's."""
_TAKEN_PAUSE = 0.01

_ENTRY_SEPARATOR = "/"
"""A sharded stream entry id: ``<shard>/<entry id>``."""


class _Shard(RedisBook):
    """One shard's own book in a ``ShardedRedisBook``: its ``expire_many`` (which the
    sweep calls on each shard, ``each_shard``) is followed by the group check of the
    members it ended (``after_ends``, the sharded book's), as every other end is."""

    def __init__(
        self,
        after_ends: Callable[[RedisBook, Sequence[Any], Sequence[str]], None],
        *args: Any,
        **settings: Any,
    ) -> None:
        super().__init__(*args, **settings)
        self._after_ends = after_ends

    @reports_outages
    def expire_many(
        self, task_ids: Iterable[str], *, full_task: bool = True
    ) -> list[AsyncTransition | AsyncBookError]:
        ids = list(task_ids)
        results = super().expire_many(ids, full_task=full_task)
        self._after_ends(self, results, ids)
        return results


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
        self.books: list[RedisBook] = [
            _Shard(
                self._after_ends,
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
        for book in self.books:
            book.shard_check = self.shard_check  # one check of the namespace's count
        self._scripts: dict[tuple[int, str], BookScript] = {}
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

    def fix_count(self) -> None:
        """Store the namespace's shard count at its first use, or check it (once)."""
        self.shard_check.fix(self.client)

    def _together(
        self, plans: Sequence[Plan[_T]], books: Sequence[RedisBook] | None = None
    ) -> list[_T]:
        engines = [book.engine for book in (self.books if books is None else books)]
        return run_together(engines, plans)

    def on_each_shard(
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

    def check_server(self, *, reading: bool = False) -> str | None:
        """Each shard's server check, and the namespace's shard count stored or checked
        (only checked when ``reading``: a book that only reads, as a status server, must
        not fix the count of a namespace nobody has written to); logs the shard map."""
        if reading:
            self.shard_check.check(self.client)
        else:
            self.fix_count()
        policies = sorted({p for book in self.books if (p := book.check_server()) is not None})
        log.info(
            "asyncbook: namespace %r has %d shards: %s",
            self.namespace,
            self.shards,
            "; ".join(f"{node} holds {ids}" for node, ids in self.shard_map().items()),
        )
        return policies[0] if policies else None

    # -- creating and reading ---------------------------------------------------------

    @reports_outages
    def create(self, **options: Unpack[CreateOptions]) -> AsyncTask:
        self.fix_count()
        return self.shard_of(options.get("id")).create(**options)

    @reports_outages
    def create_many(self, specs: Iterable[CreateSpec]) -> list[AsyncTask | AsyncBookError]:
        self.fix_count()
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
            shards, self.on_each_shard(create, [self.books[i] for i in shards]), strict=True
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
        shard than ``task_id``. Every text is an id, the empty one included: global, as
        the reference's ``callbackId !== undefined``."""
        return (
            isinstance(task_id, str)
            and isinstance(identifier, str)
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
        self.fix_count()
        book = self.shard_of(task_id)
        if not self._crosses(task_id, callback_id):
            result = book.apply(task_id, event, callback_id)
        else:
            assert callback_id is not None
            result = self._claimed(
                task_id,
                callback_id,
                lambda taken: book.engine.run(
                    operations.apply(book.layout, task_id, event, callback_id, taken=taken)
                ),
            )
        self._after_ends(book, [result], [task_id])
        return result

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
        self.fix_count()
        book = self.shard_of(task_id)
        if not self._crosses(task_id, callback_id):
            result = book.cancel(task_id, reason, at_ms=at_ms, callback_id=callback_id, actor=actor)
            self._after_ends(book, [result], [task_id])
            return result
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

        result = self._claimed(task_id, callback_id, cancel)
        self._after_ends(book, [result], [task_id])
        return result

    @reports_outages
    def expire(self, task_id: str) -> AsyncTransition:
        self.fix_count()
        book = self.shard_of(task_id)
        result = book.expire(task_id)
        self._after_ends(book, [result], [task_id])
        return result

    @reports_outages
    def apply_many(
        self, items: Iterable[ApplyItem], *, full_task: bool = True
    ) -> list[CallbackResult | AsyncBookError]:
        """``apply_many`` on each shard (a thread each); an event whose callback id lives
        in another shard is claimed there first (``_claims``)."""
        self.fix_count()
        given: list[ApplyItem] = list(items)
        out: list[CallbackResult | AsyncBookError | None] = [None] * len(given)
        by_shard: dict[int, list[int]] = {}
        claimed: dict[int, claims.Claim] = {}
        for at, item in enumerate(given):
            task_id, event, callback = item
            if self._crosses(task_id, callback):
                assert callback is not None
                found = self._claim(task_id, callback)
                if found == claims.Claim.TAKEN:
                    book = self.shard_of(task_id)
                    try:
                        out[at] = book.engine.run(
                            operations.apply(book.layout, task_id, event, callback, taken=True)
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
            mine = [given[at] for at in by_shard[index]]
            results = book.apply_many(mine, full_task=full_task)
            self._after_ends(book, results, [item[0] for item in mine])
            return results

        for index, results in zip(
            shards, self.on_each_shard(apply, [self.books[i] for i in shards]), strict=True
        ):
            for at, result in zip(by_shard[index], results, strict=True):
                out[at] = result
                if (
                    isinstance(result, AsyncBookError)
                    and claimed.get(at) == claims.Claim.NEW
                    and result.code in _RELEASED_ON
                ):
                    task_id, _event, callback = given[at]
                    assert callback is not None
                    self._release(task_id, callback)
        return [result for result in out if result is not None]

    @reports_outages
    def expire_many(
        self, task_ids: Iterable[str], *, full_task: bool = True
    ) -> list[AsyncTransition | AsyncBookError]:
        self.fix_count()
        ids = list(task_ids)
        by_shard: dict[int, list[int]] = {}
        for at, task_id in enumerate(ids):
            index = self.map.index_of(task_id) if isinstance(task_id, str) else 0
            by_shard.setdefault(index, []).append(at)
        out: list[AsyncTransition | AsyncBookError | None] = [None] * len(ids)
        shards = list(by_shard)

        def expire(book: RedisBook) -> list[AsyncTransition | AsyncBookError]:
            index = self.books.index(book)
            mine = [ids[at] for at in by_shard[index]]
            return book.expire_many(mine, full_task=full_task)  # checks its groups

        for index, results in zip(
            shards, self.on_each_shard(expire, [self.books[i] for i in shards]), strict=True
        ):
            for at, result in zip(by_shard[index], results, strict=True):
                out[at] = result
        return [result for result in out if result is not None]

    # -- the caller's own scripts --------------------------------------------------------

    def _on_shard(self, book: RedisBook, script: BookScript) -> BookScript:
        """``script`` registered on ``book``'s client (its shard's node on a Cluster)."""
        key = (book.shard[0], script.sha)
        found = self._scripts.get(key)
        if found is None:
            found = self._scripts[key] = book.engine.register(script.source)
        return found

    @reports_outages
    def apply_many_then(
        self,
        items: Iterable[ApplyItem],
        script: BookScript,
        keys: Sequence[str],
        args: Sequence[Any],
        *,
        full_task: bool = True,
    ) -> tuple[list[CallbackResult | AsyncBookError], Any]:
        """``RedisBook.apply_many_then`` when every item's task lives in one shard (one
        MULTI/EXEC cannot span shards): else ``invalid-request`` naming ``items``. The
        script's ``keys`` must be in that shard's slot (``shard_of(task_id).keys``)."""
        self.fix_count()
        given = list(items)
        shards = {self.map.index_of(item[0]) if isinstance(item[0], str) else 0 for item in given}
        if len(shards) > 1:
            raise invalid(
                "the items' tasks live in several shards: one transaction cannot span them",
                field="items",
            )
        book = self.books[shards.pop() if shards else 0]
        return book.apply_many_then(
            given, self._on_shard(book, script), keys, args, full_task=full_task
        )

    @reports_outages
    def apply_in_script(
        self,
        task_id: str,
        items: Sequence[tuple[EventInput | None, str | None]],
        script: BookScript,
        key: str,
        args: Sequence[str],
        *,
        name: str | None = None,
        group_id: str | None = None,
    ) -> ScriptedEvents:
        """``RedisBook.apply_in_script`` in the task's shard (``key`` must be in that
        shard's slot on a Cluster). Callback ids are the task's shard's markers: give ids
        derived from the task id (``<task id>:...``) for them to be global."""
        self.fix_count()
        book = self.shard_of(task_id)
        answer = book.apply_in_script(
            task_id, items, self._on_shard(book, script), key, args, name=name, group_id=group_id
        )
        ended = any(
            not isinstance(each, AsyncBookError) and each.changed for each in answer.outcomes
        )
        if ended and answer.state in GROUP_END_STATES:
            group = groups.group_of_result(book, task_id)
            if group is not None:
                self._check_group(group, None)
        return answer

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
        self.fix_count()
        book = self.shard_of(task_id)
        if not self.map.key_crosses(task_id, idempotency_key) or is_blank(idempotency_key):
            return book.deliver_result(task_id, idempotency_key, now_ms)
        key = utf8(idempotency_key, "idempotencyKey")
        now = require_non_negative(now_ms, "nowMs")
        task_id = utf8(task_id, "taskId")
        damaged: str | None = None
        try:
            task = book.get(task_id)
        except DamagedRecordError as error:
            task, damaged = None, error.message
        home = self.books[self.map.key_index(key)]
        home.engine.before_write()
        reply = home.engine.run(
            claims.deliver_known(home.layout, key, task, damaged, number_text(now))
        )
        return operations.delivery_of(task_id, reply)

    # -- groups (``_sharded_groups``) --------------------------------------------------

    def _group_counters(self, group_id: str) -> list[dict[str, str]]:
        return self._merged(groups.counters(self._layouts, group_id))

    def _home_of_group(self, group_id: str) -> RedisBook:
        return self.books[self.map.index_of(group_id)]

    def _after_ends(self, book: RedisBook, results: Sequence[Any], task_ids: Sequence[str]) -> None:
        """The group check after members ended: each group once."""
        for group_id, at_ms in groups.ended_groups(book, results, task_ids).items():
            self._check_group(group_id, at_ms)

    def _check_group(self, group_id: str, at_ms: float | None) -> None:
        self._merged(groups.check(self._layouts, group_id, self.map.index_of(group_id), at_ms))

    @reports_outages
    def seal_group(self, group_id: str, total: int) -> GroupSummary:
        """The total declared in the group's home shard, then the group check."""
        self.fix_count()
        group = utf8(require_text(group_id, "groupId"), "groupId")
        home = self._home_of_group(group)
        home.seal_group(group, total)
        self._check_group(group, None)
        counters = self._group_counters(group)
        summary = groups.summary_of(group, counters[home.shard[0]], counters)
        assert summary is not None  # the home shard holds the sealed group
        return summary

    @reports_outages
    def group(self, group_id: str) -> GroupSummary | None:
        group = utf8(require_text(group_id, "groupId"), "groupId")
        return self._merged(groups.summary(self._layouts, group, self.map.index_of(group)))

    @reports_outages
    def group_members(self, group_id: str, limit: int = 100) -> list[AsyncTask]:
        """Every shard's members merged in creation order (unique across shards)."""
        group = utf8(require_text(group_id, "groupId"), "groupId")
        count = require_limit(limit, maximum=10_000)
        return self._merged(groups.members(self._layouts, group, count))

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
        return self._merged(lists.overdue(self._layouts, now, count))

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
        """Every shard's page merged by creation order (``_sharded_lists.newest_page``)."""
        return self._merged(lists.newest_page(self._layouts, state, limit, after, full_task))

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

        def end(book: RedisBook) -> list[CallbackResult | AsyncBookError]:
            results = book.end_stalled(now, limit)
            ids = ["" if isinstance(r, AsyncBookError) else r.task.id for r in results]
            self._after_ends(book, results, ids)
            return results

        return [result for results in self.on_each_shard(end) for result in results]

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
        """Each shard's ``prune`` (a thread each), looking at ``limit`` / S entries per
        index of each shard: a pass costs what it costs on one shard (the sweep makes
        one a second), and regular passes still visit every entry in turn."""
        count = require_limit(limit, maximum=1_000_000)
        share = -(-count // self.shards)
        return sum(self.on_each_shard(lambda book: book.prune(share)))

    # -- the operator console (_sharded_console) ------------------------------------------

    @property
    def _layouts(self) -> list[Shard]:
        return [book.layout for book in self.books]

    def _merged(self, plan: MergedPlan[_T]) -> _T:
        """A merged read, its shards' plans run together (``run_together``)."""

        def on_shards(asked: OnShards) -> list[Any]:
            books = self.books if asked.shards is None else [self.books[i] for i in asked.shards]
            return self._together(list(asked.plans), books)

        return drive(plan, on_shards)

    @reports_outages
    def info(self, task_id: str) -> TaskInfo | None:
        return self.shard_of(task_id).info(task_id)

    @reports_outages
    def audit(
        self, task_id: str | None = None, *, since_ms: int | float | None = None, limit: int = 100
    ) -> list[AuditEntry]:
        """A task's entries, or every shard's log merged, newest first."""
        if task_id is not None:
            return self.shard_of(task_id).audit(task_id, since_ms=since_ms, limit=limit)
        return self._merged(console.audit(self._layouts, since_ms, limit))

    @reports_outages
    def record_audit(
        self, task_id: str, action: str, actor: str, reason: str | None, outcome: str
    ) -> None:
        self.shard_of(task_id).record_audit(task_id, action, actor, reason, outcome)

    @reports_outages
    def search(self, query: TaskQuery | None = None, /, **filters: Any) -> SearchPage:
        """Every shard's page merged in the query's order (``_sharded_console``)."""
        given = TaskQuery(**filters) if query is None else query
        return self._merged(console.search(self._layouts, given))

    @reports_outages
    def workers(self, within_ms: int = 86_400_000) -> list[WorkerSummary]:
        return self._merged(console.workers(self._layouts, within_ms))

    @reports_outages
    def stats(
        self, name: str | None = None, window_ms: int = 3_600_000, now_ms: int | None = None
    ) -> TaskStats:
        """Every shard's stats summed; percentiles from the summed runtime buckets."""
        return self._merged(console.stats(self._layouts, name, window_ms, now_ms))

    @reports_outages
    def task_names(self, within_ms: int | None = None) -> list[str]:
        return self._merged(console.task_names(self._layouts, within_ms))

    @reports_outages
    def name_totals(self) -> list[NameTotals]:
        return self._merged(console.name_totals(self._layouts))

    @reports_outages
    def gauges(self, now_ms: int, within_ms: int = GAUGE_WORKERS_WITHIN_MS) -> BookGauges:
        """Every shard's gauges merged (``_sharded_console.gauges``)."""
        return self._merged(console.gauges(self._layouts, now_ms, within_ms))

    # -- capabilities -------------------------------------------------------------------

    def wait_for_writes(self, writes: HeldWrites) -> None:
        """Registered once for the namespace, which every shard's engine settles by."""
        super().wait_for_writes(writes)

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
        """None: the status server reads a sharded book through its sync calls, on
        threads (``AsyncRedisBook.twin_of(book)`` gives an ``AsyncShardedRedisBook`` for
        an asyncio application)."""
        return None

    def script_beside(self, client: object, source: str) -> None:
        """None: a sharded book's events are not fused with a caller's script."""
        return None


RedisBook.sharded_type = ShardedRedisBook
