"""``RedisBook``: the durable book, one atomic Lua call per change.

Follows SPEC.md exactly as ``MemoryBook`` does (a differential test holds them to the
same results). Event shapes are checked in Python; every rule that reads stored state
runs inside the script, in the reference's order. The scripts' arguments are built in
``_args``, their replies read in ``_replies``; the notification streams are ``_outbox``'s.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from redis.cluster import RedisCluster
from redis.exceptions import NoScriptError, ResponseError

from .._book import ApplyItem, CreateSpec, EventInput
from .._checks import (
    require_heartbeat_timeout,
    require_integer,
    require_limit,
    require_non_negative,
    require_string,
    require_text,
)
from .._console import (
    NameTotals,
    PublishInfo,
    SearchPage,
    TaskInfo,
    TaskQuery,
    TaskStats,
    WorkerSummary,
)
from .._machine import create_async_task, stall_event
from .._models import (
    GROUP_END_STATES,
    AsyncTask,
    AsyncTransition,
    CallbackResult,
    DeliveryResult,
    GroupSummary,
    ResumeResult,
    TaskPage,
)
from ..errors import (
    AsyncBookError,
    DamagedRecordError,
)
from . import _console
from . import _operations as operations
from ._args import dumps, number_text, utf8
from ._base import DEFAULT_RETENTION, BookBase
from ._connection import connect, reports_outages
from ._console import WORKER_KEEP_MS, publish_fields
from ._facts import FIELDS as FACT_FIELDS
from ._facts import TaskFacts, facts_of
from ._outbox import Outbox
from ._pending import settle
from ._plan import Command, Plan, Request, ScriptCall, Settle, run, server_time
from ._replies import (
    callback_result,
    created,
    group_summary_of,
    outcome,
    script_error,
    status_of,
    text_of,
)
from ._scripts import (
    ApplyArgs,
    BookScript,
    CreateArgs,
    ScriptedEvents,
    ScriptStatus,
    SealGroupArgs,
    TaskIdsArgs,
    with_helpers,
)

if TYPE_CHECKING:
    from ._sender import CreateSender

__all__ = ["RedisBook"]

log = logging.getLogger(__name__)


_T = TypeVar("_T")

_ExtraCall = tuple[BookScript, Sequence[str], Sequence[Any]]
"""A script call run after the events of a batch, in the same transaction."""


class RedisBook(Outbox, BookBase):
    """A book in Redis: durable, shared by workers, beat and the status server."""

    def __init__(
        self,
        client: Any,
        *,
        namespace: str = "asyncbook",
        retention_versions: int = 8,
        retention: timedelta | None = DEFAULT_RETENTION,
    ) -> None:
        super().__init__(
            client,
            namespace=namespace,
            retention_versions=retention_versions,
            retention=retention,
        )
        self._groups = set()
        self._prune_from: dict[str, str] = {}

    @classmethod
    def _client_for(cls, url: str, **options: Any) -> Any:
        return connect(url, **options)

    def check_server(self) -> str | None:
        """Check the book's server (once per book, one round trip); returns its
        ``maxmemory-policy`` (None when INFO is refused). Called before the first write.

        Raises ``UnsupportedServerError`` when the server runs no Lua scripts (Valkey can
        be built or started without its Lua engine) or is older than Redis 7.0 or
        Valkey 8.1. Warns when the server may evict: with any ``maxmemory-policy`` but
        ``noeviction`` (``allkeys-lru`` and ``volatile-lru`` are defaults on some managed
        services) a full server drops keys of live tasks or half of a task's record.
        """
        return self._run(operations.check_server(self.layout))

    def check_eviction_policy(self) -> str | None:
        """The server's ``maxmemory-policy``, warned about as ``check_server`` does."""
        return self.check_server()

    def _before_write(self) -> None:
        self._run(operations.before_write(self.layout))

    def _settle(self) -> None:
        """Wait for the creates this process wrote to the book and has no answer for yet
        (read-your-writes for a publisher whose creates do not wait)."""
        settle(self.namespace)

    def _run(self, plan: Plan[_T]) -> _T:
        """Run one of the book's plans (``_operations``) on its client."""
        return run(plan, self._execute)

    def _execute(self, request: Request) -> Any:
        if isinstance(request, ScriptCall):
            script: BookScript = request.script or getattr(self._scripts, request.name)
            return script(request.keys, request.args)
        if isinstance(request, Settle):
            return self._settle()
        client = self._slot_client()
        if isinstance(request, Command):
            return getattr(client, request.name)(*request.args, **request.options)
        pipe = client.pipeline(transaction=False)
        for each in request.commands:
            getattr(pipe, each.name)(*each.args, **each.options)
        return pipe.execute(raise_on_error=not request.errors_as_replies)

    # -- creating and reading -------------------------------------------------------

    @reports_outages
    def create(
        self,
        *,
        id: str,
        now_ms: int | float,
        ttl_ms: int | float,
        max_attempts: int,
        exist_ok: bool = False,
        heartbeat_timeout_ms: int | None = None,
        retry_on_stall: bool = False,
        group_id: str | None = None,
        info: PublishInfo | None = None,
    ) -> AsyncTask:
        """Store a new queued task; an existing id is ``conflict`` unless ``exist_ok``.

        With ``heartbeat_timeout_ms`` a running attempt silent for that long is ended by
        ``end_stalled`` (retryable when ``retry_on_stall``). With ``group_id`` the task is
        a member of that group (``group``, ``seal_group``). ``info`` is kept for the
        console (``info``, ``search``, ``stats``); the task itself does not show it.
        """
        spec = CreateSpec(
            id,
            now_ms,
            ttl_ms,
            max_attempts,
            exist_ok,
            heartbeat_timeout_ms,
            retry_on_stall,
            group_id,
            info,
        )
        task, keys, args = self._create_call(spec)
        self._before_write()
        return created(id, task, self._scripts.create(keys=keys, args=args))

    @reports_outages
    def create_many(self, specs: Iterable[CreateSpec]) -> list[AsyncTask | AsyncBookError]:
        """``create`` for each spec, in one pipelined round trip (each atomic on its own);
        a spec the book refuses answers its error in its place."""
        results: list[AsyncTask | AsyncBookError | None] = []
        calls: list[tuple[int, str, AsyncTask, list[str], list[str]]] = []
        for spec in specs:
            try:
                calls.append((len(results), spec.id, *self._create_call(spec)))
            except AsyncBookError as error:
                results.append(error)
                continue
            results.append(None)
        self._before_write()
        script = self._scripts.create
        replies: list[Any] = []
        if calls:
            pipe = self._slot_client().pipeline(transaction=False)
            for _index, _id, _task, keys, args in calls:
                pipe.evalsha(script.sha, len(keys), *keys, *args)
            replies = list(pipe.execute(raise_on_error=False))
            if any(isinstance(reply, NoScriptError) for reply in replies):
                # Nothing ran where NOSCRIPT came back: EVAL (runs and caches) those again.
                pipe = self._slot_client().pipeline(transaction=False)
                for (_index, _id, _task, keys, args), reply in zip(calls, replies, strict=True):
                    if isinstance(reply, NoScriptError):
                        pipe.eval(script.source, len(keys), *keys, *args)
                again = iter(pipe.execute(raise_on_error=False))
                replies = [next(again) if isinstance(r, NoScriptError) else r for r in replies]
        for (index, task_id, task, _keys, _args), reply in zip(calls, replies, strict=True):
            if isinstance(reply, ResponseError) and not script_error(reply):
                raise reply  # the server refused the call (OOM, READONLY): retry the batch
            try:
                if isinstance(reply, ResponseError):
                    raise DamagedRecordError(task_id, str(reply))
                results[index] = created(task_id, task, reply)
            except AsyncBookError as error:
                results[index] = error
        return [result for result in results if result is not None]

    def create_sender(self) -> CreateSender:
        """A ``CreateSender`` on this book: creates written at once, answers read later."""
        from ._sender import CreateSender

        return CreateSender(self)

    def _create_call(self, spec: CreateSpec) -> tuple[AsyncTask, list[str], list[str]]:
        """The task create.lua would store, and the script's KEYS and ARGV."""
        id = spec.id
        group = None
        if spec.group_id is not None:
            group = utf8(require_text(spec.group_id, "groupId"), "groupId")
        task = create_async_task(
            id=id, now_ms=spec.now_ms, ttl_ms=spec.ttl_ms, max_attempts=spec.max_attempts
        )
        timeout = require_heartbeat_timeout(spec.heartbeat_timeout_ms)
        k = self.keys
        keys = [
            k.task(id),
            k.history(id),
            k.state_index("queued"),
            k.deadlines,
            k.sequence,
            k.group(group or ""),
            k.group_members(group or ""),
        ]
        published = publish_fields(spec.info)
        name, parent = published.get("name", ""), published.get("parent_id", "")
        keys += [k.info(id), k.names, k.name_index("queued", name), k.children(parent)]
        group_json = "" if group is None else dumps(group, "groupId")
        deadline = number_text(task.expires_at_ms)
        self.layout.facts.learn(id, TaskFacts(name, group_json, "", deadline))
        args = CreateArgs(
            task_id=id,
            task_id_json=dumps(id, "id"),
            deadline=deadline,
            max_attempts=task.max_attempts,
            exist_ok=spec.exist_ok,
            changes_channel=k.changes_channel,
            heartbeat_timeout_ms=timeout,
            retry_on_stall=bool(spec.retry_on_stall),
            group_id_json=group_json,
            created_ms=number_text(spec.now_ms),
            children_keep_ms=self._children_keep_ms(spec),
            **published,
        ).argv()
        return task, keys, args

    def _children_keep_ms(self, spec: CreateSpec) -> str:
        """How long a parent's list of children is kept: the child's life and retention."""
        if not self.layout.retention_ms or spec.info is None or spec.info.parent_id is None:
            return ""
        return str(int(self.layout.retention_ms) + max(0, math.ceil(float(spec.ttl_ms))))

    @reports_outages
    def get(self, id: str) -> AsyncTask | None:
        """The stored task with its history, or None."""
        return self._run(operations.get(self.layout, id))

    # -- applying events ---------------------------------------------------------------

    def _apply_one(self, keys: list[str], args: ApplyArgs) -> Any:
        """apply.lua's reply to one call, with the task's info block."""
        return self._run(operations.apply_one(self.layout, keys, args))

    @reports_outages
    def apply(
        self, task_id: str, event: EventInput, callback_id: str | None = None
    ) -> CallbackResult:
        """Apply one event; a callback id already recorded changes nothing."""
        return self._run(operations.apply(self.layout, task_id, event, callback_id))

    @reports_outages
    def cancel(
        self,
        task_id: str,
        reason: str | None = None,
        *,
        at_ms: int | float | None = None,
        callback_id: str | None = None,
    ) -> CallbackResult:
        """Cancel a queued or running task (extension): ``apply`` of a ``cancel`` event.

        ``at_ms`` defaults to the Redis server's clock.
        """
        return self._run(operations.cancel(self.layout, task_id, reason, at_ms, callback_id))

    @reports_outages
    def expire(self, task_id: str) -> AsyncTransition:
        """Expire the task at its deadline, as the sweep does (notified at the deadline)."""
        return self._run(operations.expire(self.layout, task_id)).transition()

    @reports_outages
    def apply_many(
        self, items: Iterable[ApplyItem], *, full_task: bool = True
    ) -> list[CallbackResult | AsyncBookError]:
        """Apply many events in one pipelined round trip, each atomic on its own.

        With ``full_task=False`` each result's task comes without its history (cheaper,
        for callers that only need the reasons, such as the sweep).
        """
        return self._run_many(list(items), full_task)

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
        """``apply_many`` and then one more script, all in one MULTI/EXEC: one round trip,
        nothing runs between them, and the script sees what the events changed.

        After Redis lost the scripts (SCRIPT FLUSH, a restart) the call is sent again
        with them: give the items callback ids, and make the script safe to run twice.

        ``script`` (a ``BookScript``, for instance from ``extra_script``) must touch only
        keys on the book's Redis (on a Cluster: in the book's slot). Returns the events'
        results and the script's reply; an error the script raised is raised.
        """
        results, reply = self._run_many_then(list(items), full_task, (script, keys, args))
        if isinstance(reply, Exception):
            raise reply
        return results, reply

    def extra_script(self, source: str) -> BookScript:
        """A script of the caller's, registered on the book's client, for
        ``apply_many_then`` (no round trip until first use)."""
        client = self._slot_client()
        return BookScript(client.register_script(source), client)

    def events_script(self, source: str) -> BookScript:
        """A script of the caller's for ``apply_in_script``: ``source`` runs with the task
        helpers and ``apply_event`` (apply.lua's body) in front of it."""
        client = self._slot_client()
        return BookScript(client.register_script(with_helpers(source)), client)

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
        """Events of one task and the caller's own Lua around them, in one script call.

        ``script`` (from ``events_script``) gets KEYS: the task's hash, its history,
        ``key``, apply.lua's KEYS 4..14, then one callback marker per event; ARGV:
        ``args``, the number of events, then apply.lua's ARGV per event (ApplyArgs). It
        applies them with ``apply_events(KEYS, ARGV, len(args) + 1)`` (_apply.lua) and
        answers ``{'!unknown'}`` (raised as ``UnknownTaskError``) or
        ``{status, state, answers}``, ``answers`` being what ``apply_events`` returned.
        An event None expires the task at its deadline (as ``expire``).

        ``key`` must be on the book's Redis; on a Cluster, in the book's slot. ``name``
        and ``group_id``, the task's name and group where the caller knows them (a
        worker does), save a round trip when this book has not seen the task before.
        """
        calls = [
            self.layout.apply_call(task_id, event, callback_id, full_task=False)
            for event, callback_id in items
        ]
        task_id = utf8(require_string(task_id, "taskId"), "taskId")
        if self.layout.facts.get(task_id) is None and isinstance(name, str):
            group = dumps(group_id, "groupId") if isinstance(group_id, str) else ""
            self.layout.facts.learn(task_id, TaskFacts(name=name, group_json=group))
        k = self.keys
        keys = [k.task(task_id), k.history(task_id), key, *self.layout.apply_keys]
        argv = [*args, str(len(calls))]
        for call_keys, call_args, _error in calls:
            keys.append(call_keys[2])
            argv.extend(call_args.argv())
        self._before_write()
        plan = self.layout.facts.run(
            task_id,
            [call_args.event for _keys, call_args, _error in calls],
            lambda block, facts: ScriptCall("", keys + block, argv + facts, script=script),
        )
        reply = self._run(plan)
        status_of(task_id, reply)
        outcomes = [
            outcome(task_id, answer, error)
            for answer, (_keys, _args, error) in zip(reply[2], calls, strict=True)
        ]
        return ScriptedEvents(text_of(reply[0]), text_of(reply[1]), outcomes)

    @reports_outages
    def expire_many(
        self, task_ids: Iterable[str], *, full_task: bool = True
    ) -> list[AsyncTransition | AsyncBookError]:
        """Expire many tasks at their deadlines in one pipelined round trip."""
        results = self._run_many([(task_id, None, None) for task_id in task_ids], full_task)
        return [r if isinstance(r, AsyncBookError) else r.transition() for r in results]

    def _run_many(
        self, items: list[tuple[Any, EventInput | None, Any]], full_task: bool
    ) -> list[CallbackResult | AsyncBookError]:
        return self._run_many_then(items, full_task, None)[0]

    def _run_many_then(
        self,
        items: list[tuple[Any, EventInput | None, Any]],
        full_task: bool,
        extra: _ExtraCall | None,
    ) -> tuple[list[CallbackResult | AsyncBookError], Any]:
        results: list[CallbackResult | AsyncBookError | None] = [None] * len(items)
        calls: list[tuple[int, list[str], ApplyArgs, AsyncBookError | None]] = []
        for index, (task_id, event, callback_id) in enumerate(items):
            try:
                call = self.layout.apply_call(task_id, event, callback_id, full_task)
                calls.append((index, *call))
            except AsyncBookError as error:
                results[index] = error
        self._before_write()
        self._settle()
        node = self._slot_client()
        self._learn_facts(node, calls)
        replies = self._run_batch(node, calls, load_script=False, extra=extra)
        extra_reply = replies.pop() if extra is not None else None
        if any(isinstance(reply, NoScriptError) for reply in replies):
            # Redis lost apply.lua (SCRIPT FLUSH, a restart, a failover): every apply call
            # of the transaction failed alike, so the whole batch runs again, in order,
            # behind a SCRIPT LOAD in the same transaction (the extra script too: it must
            # run after the events, and may have run once already, before them).
            replies = self._run_batch(node, calls, load_script=True, extra=extra)
            extra_reply = replies.pop() if extra is not None else None
        elif extra is not None and isinstance(extra_reply, NoScriptError):
            # Only the extra script was missing: the events ran; it runs after them.
            extra_reply = self._run_batch(node, [], load_script=True, extra=extra)[0]
        if isinstance(extra_reply, ResponseError) and not script_error(extra_reply):
            raise extra_reply  # the server refused the whole batch: retry it
        for (index, keys, args, shape_error), reply in zip(calls, replies, strict=True):
            if isinstance(reply, ResponseError) and not script_error(reply):
                raise reply  # the server refused the whole batch (OOM, READONLY): retry it
            if isinstance(reply, ResponseError):
                results[index] = DamagedRecordError(args.task_id, str(reply))
                continue
            try:
                facts = facts_of(reply)
                if facts is not None:
                    # Its record changed since _learn_facts read it: this item again, alone.
                    self.layout.facts.learn(args.task_id, facts)
                    reply = self._apply_one(keys, args)
                else:
                    self.layout.facts.started(args.task_id, [args.event])
                results[index] = callback_result(args.task_id, reply, shape_error)
            except AsyncBookError as error:
                results[index] = error
        return [r for r in results if r is not None], extra_reply

    def _learn_facts(
        self, node: Any, calls: list[tuple[int, list[str], ApplyArgs, AsyncBookError | None]]
    ) -> None:
        """Read the facts of the batch's tasks this book does not know yet (one round trip;
        none when it knows them all, or the events are progress reports, which need none)."""
        unknown = sorted(
            {
                args.task_id
                for _index, _keys, args, _error in calls
                if args.event.type != "progress" and self.layout.facts.get(args.task_id) is None
            }
        )
        if not unknown:
            return
        pipe = node.pipeline(transaction=False)
        for task_id in unknown:
            pipe.hmget(self.keys.task(task_id), *FACT_FIELDS)
        for task_id, fields in zip(unknown, pipe.execute(), strict=True):
            self.layout.facts.learn(task_id, TaskFacts.of_fields(fields))

    def _run_batch(
        self,
        node: Any,
        calls: list[tuple[int, list[str], ApplyArgs, AsyncBookError | None]],
        *,
        load_script: bool,
        extra: _ExtraCall | None = None,
    ) -> list[Any]:
        """One MULTI/EXEC of the apply calls (and the extra script call last): they run in
        order, with no script flush or failover between them (a plain pipeline could lose
        one item and run the next)."""
        script = self._scripts.apply
        pipe = node.pipeline(transaction=True)
        loads = 0
        if load_script:
            if calls:
                pipe.script_load(script.source)
                loads += 1
            if extra is not None:
                pipe.script_load(extra[0].source)
                loads += 1
        for _index, keys, args, _error in calls:
            block, facts = self.layout.facts.block(args.task_id, [args.event])
            pipe.evalsha(script.sha, len(keys) + len(block), *keys, *block, *args.argv(), *facts)
        if extra is not None:
            extra_script, extra_keys, extra_args = extra
            pipe.evalsha(extra_script.sha, len(extra_keys), *extra_keys, *extra_args)
        replies = list(pipe.execute(raise_on_error=False))
        return replies[loads:]

    def _slot_client(self) -> Any:
        """A client for pipelines: on a Cluster, the node owning the book's one slot.

        redis-py refuses EVALSHA in cluster pipelines; every key of a book shares one hash
        tag, so a plain pipeline on that node is exact.
        """
        if isinstance(self.client, RedisCluster):
            cluster: Any = self.client
            return cluster.get_node_from_key(self.keys.tag).redis_connection
        return self.client

    # -- reconnecting and delivering ----------------------------------------------------

    @reports_outages
    def resume(self, task_id: str, cursor_version: int, *, full_task: bool = True) -> ResumeResult:
        """What changed after ``cursor_version``: caught-up, a delta, or a snapshot.

        With ``full_task=False`` a caught-up or delta answer carries the task without its
        history, so it costs O(events returned) however long the history is.
        """
        return self._run(operations.resume(self.layout, task_id, cursor_version, full_task))

    @reports_outages
    def deliver_result(
        self, task_id: str, idempotency_key: str, now_ms: int | float
    ) -> DeliveryResult:
        """Hand the result over once per idempotency key."""
        return self._run(operations.deliver_result(self.layout, task_id, idempotency_key, now_ms))

    # -- indexes ------------------------------------------------------------------------

    @reports_outages
    def overdue(self, now_ms: int | float, limit: int = 1000) -> list[str]:
        """Ids of live tasks whose deadline is at or before ``now_ms``, earliest first."""
        return self._run(operations.overdue(self.layout, now_ms, limit))

    @reports_outages
    def overdue_count(self, now_ms: int | float) -> int:
        """How many live tasks have a deadline at or before ``now_ms`` (one ZCOUNT)."""
        return self._run(operations.overdue_count(self.layout, now_ms))

    @reports_outages
    def record_sweep(self, at_ms: int | float) -> None:
        """Note that a sweep ran at ``at_ms`` (kept without expiry: one small key)."""
        self._run(operations.record_sweep(self.layout, at_ms))

    @reports_outages
    def last_sweep_ms(self) -> int | None:
        """When a sweep last ran, or None if none ever did."""
        return self._run(operations.last_sweep_ms(self.layout))

    @reports_outages
    def claim_sweep(self, owner: str, lease_ms: int) -> bool:
        """Take the namespace's sweep lease for ``lease_ms`` if nobody holds it, or renew it
        if ``owner`` does (``SET NX PX GET``): True if ``owner`` may sweep now. A holder
        that stops renewing (it died) is replaced once its lease lapses."""
        return self._run(operations.claim_sweep(self.layout, owner, lease_ms))

    @reports_outages
    def list_tasks(
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
        return self._run(operations.list_tasks(self.layout, state, limit, after, full_task))

    @reports_outages
    def heartbeat(self, task_ids: Iterable[str]) -> int:
        """Say that these tasks' running attempts are alive: one round trip for them all."""
        ids = [utf8(require_string(task_id, "taskId"), "taskId") for task_id in task_ids]
        if not ids:
            return 0
        keys = [self.keys.stalls, self.keys.workers, *(self.keys.task(task_id) for task_id in ids)]
        return int(self._scripts.heartbeat(keys=keys, args=TaskIdsArgs(tuple(ids)).argv()))

    @reports_outages
    def end_stalled(
        self, now_ms: int | float | None = None, limit: int = 1000
    ) -> list[CallbackResult | AsyncBookError]:
        """Fail every running task whose heartbeat is overdue (by the server's clock).

        The script checks again, atomically, that the task is still overdue, so a
        heartbeat that arrives meanwhile wins; each fail carries a callback id naming the
        stall, so two sweeps fail a task once.
        """
        now = self.now_ms() if now_ms is None else require_non_negative(now_ms, "nowMs")
        count = require_limit(limit, maximum=1_000_000)
        due = self.client.zrangebyscore(
            self.keys.stalls, "-inf", now, start=0, num=count, withscores=True
        )
        if not due:
            return []
        hashes = [self.keys.task(text_of(raw)) for raw, _ in due]
        pipe = self._slot_client().pipeline(transaction=False)
        for key in hashes:
            pipe.hmget(key, "hbt", "rdl", *FACT_FIELDS)
        settings = pipe.execute()
        results: list[CallbackResult | AsyncBookError] = []
        for (raw, stall_at), (timeout, retry, *facts) in zip(due, settings, strict=True):
            task_id = text_of(raw)
            if timeout is None:
                continue
            self.layout.facts.learn(task_id, TaskFacts.of_fields(facts))
            event = stall_event(now, int(timeout), text_of(retry or b"0") == "1")
            keys, args, _ = self.layout.apply_call(
                task_id, event, f"stalled:{task_id}:{int(stall_at)}", only_if_stalled=True
            )
            reply = self._apply_one(keys, args)
            if text_of(reply[0]) == ScriptStatus.FRESH:
                continue
            try:
                results.append(callback_result(task_id, reply, None))
            except AsyncBookError as error:
                results.append(error)
        return results

    @reports_outages
    def last_cursor(self, task_id: str) -> str | None:
        """The cursor of the last progress the task reported (its checkpoint), or None."""
        return self._run(operations.last_cursor(self.layout, task_id))

    @reports_outages
    def seal_group(self, group_id: str, total: int) -> GroupSummary:
        """Declare that ``group_id`` has ``total`` members: once they have all ended, one
        group notification (at once if they already have)."""
        group = utf8(require_text(group_id, "groupId"), "groupId")
        size = require_integer(total, "total", 1)
        flat = self._scripts.seal_group(
            keys=[self.keys.group(group), self.keys.group_members(group), self.keys.group_outbox],
            args=SealGroupArgs(
                dumps(group, "groupId"), size, self.now_ms(), self.layout.retention_ms
            ).argv(),
        )
        return group_summary_of(group, flat)

    @reports_outages
    def group(self, group_id: str) -> GroupSummary | None:
        """The group's counts by state and its progress: one round trip, O(1)."""
        return self._run(operations.group(self.layout, group_id))

    @reports_outages
    def group_members(self, group_id: str, limit: int = 100) -> list[AsyncTask]:
        """The group's members in creation order (without histories), up to ``limit``."""
        return self._run(operations.group_members(self.layout, group_id, limit))

    @reports_outages
    def now_ms(self) -> int:
        """The Redis server's clock (TIME): one clock for every worker, beat and client."""
        return self._run(server_time())

    # -- the operator console -------------------------------------------------------

    @reports_outages
    def info(self, task_id: str) -> TaskInfo | None:
        """A task's info (Celery name, arguments, queue, worker, times, traceback), or
        None when the book does not hold the task."""
        return self._run(_console.info(self.layout, task_id))

    @reports_outages
    def search(self, query: TaskQuery | None = None, /, **filters: Any) -> SearchPage:
        """One page of tasks matching a ``TaskQuery`` (or its fields as keywords: name,
        state, worker, q, since_ms, until_ms, sort, limit, after), with totals per state."""
        given = TaskQuery(**filters) if query is None else query
        return self._run(_console.search(self.layout, given))

    @reports_outages
    def workers(self, within_ms: int = 86_400_000) -> list[WorkerSummary]:
        """Workers seen in the last ``within_ms``, most recently seen first."""
        return self._run(_console.workers(self.layout, within_ms))

    @reports_outages
    def stats(
        self, name: str | None = None, window_ms: int = 3_600_000, now_ms: int | None = None
    ) -> TaskStats:
        """Per-minute starts, ends by state and runtime percentiles of one task name (None:
        every task) over the last ``window_ms`` (one minute to a day): one round trip."""
        return self._run(_console.stats(self.layout, name, window_ms, now_ms))

    @reports_outages
    def task_names(self, within_ms: int | None = None) -> list[str]:
        """Task names the book has seen (created within ``within_ms``), sorted."""
        return self._run(_console.task_names(self.layout, within_ms))

    @reports_outages
    def name_totals(self) -> list[NameTotals]:
        """Running totals per task name, for Prometheus counters and histograms."""
        return self._run(_console.name_totals(self.layout))

    @reports_outages
    def count_by_state(self) -> dict[str, int]:
        """How many tasks each state index holds (one pipelined round trip)."""
        return self._run(operations.count_by_state(self.layout))

    @reports_outages
    def transition_counts(self) -> dict[str, int]:
        """How many times each reason was answered, by every client of this book."""
        return self._run(operations.transition_counts(self.layout))

    @reports_outages
    def prune(self, limit: int = 1000) -> int:
        """Drop index entries of ended tasks whose records expired; returns how many.

        Looks at up to ``limit`` entries per index (each terminal state's, each task
        name's and each worker's), oldest first, resuming where the previous call
        stopped, so regular calls (the sweep makes one per pass) visit every entry in turn.
        """
        if self.retention is None:
            return 0
        count = require_limit(limit, maximum=1_000_000)
        k = self.keys
        client = self._slot_client()
        indexes = [k.state_index(state) for state in GROUP_END_STATES]
        names = [text_of(raw) for raw in client.zrange(k.names, 0, -1)]
        indexes += [k.name_index(state, name) for name in names for state in GROUP_END_STATES]
        # A worker unseen for a week is forgotten, with its index and counts.
        cutoff = f"({self.now_ms() - WORKER_KEEP_MS}"
        for raw in client.zrangebyscore(k.workers, "-inf", cutoff):
            worker = text_of(raw)
            client.delete(k.worker_tasks(worker), k.worker_counts(worker))
            client.zrem(k.workers, worker)
        indexes += [k.worker_tasks(text_of(raw)) for raw in client.zrange(k.workers, 0, -1)]
        pipe = client.pipeline(transaction=False)
        for index in indexes:
            low = self._prune_from.get(index, "-inf")
            pipe.zrangebyscore(index, low, "+inf", start=0, num=count, withscores=True)
        dropped = 0
        for index, rows in zip(indexes, pipe.execute(), strict=True):
            if len(rows) < count:
                self._prune_from.pop(index, None)
            else:
                self._prune_from[index] = f"({int(rows[-1][1])}"
            ids = [text_of(raw_id) for raw_id, _ in rows]
            if ids:
                keys = [index, *(k.task(task_id) for task_id in ids)]
                dropped += int(self._scripts.prune(keys=keys, args=TaskIdsArgs(tuple(ids)).argv()))
        return dropped
