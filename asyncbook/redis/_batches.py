"""Many calls at once on a ``RedisBook``'s engine: pipelined creates, batches of events
in one MULTI/EXEC (with a script of the caller's after them), events inside a script of
the caller's, the sweep's stall fails and the index prune.

Each function takes the book's ``Engine``; ``RedisBook`` delegates to them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from redis.exceptions import MovedError, NoScriptError, ResponseError

from .._book import CreateSpec, EventInput
from .._checks import require_limit, require_string
from .._machine import stall_event
from .._models import GROUP_END_STATES, AsyncTask, CallbackResult
from ..errors import AsyncBookError, DamagedRecordError
from ._args import dumps, utf8
from ._console import WORKER_KEEP_MS
from ._engine import Engine
from ._facts import FIELDS as FACT_FIELDS
from ._facts import TaskFacts, facts_of
from ._plan import ScriptCall, server_time
from ._replies import callback_result, created, outcome, script_error, status_of, text_of
from ._script_args import ApplyArgs, EventArgs, TaskIdsArgs
from ._scripts import BookScript, ScriptedEvents, ScriptStatus

__all__ = [
    "ApplyBatchItem",
    "ExtraCall",
    "apply_in_script",
    "apply_many_then",
    "create_many",
    "end_stalled",
    "prune",
]

ExtraCall = tuple[BookScript, Sequence[str], Sequence[Any]]
"""A script call run after the events of a batch, in the same transaction."""
ApplyBatchItem = tuple[Any, EventInput | None, Any]
"""(task id, event or None to expire at the deadline, callback id)."""
_Call = tuple[int, list[str], ApplyArgs, AsyncBookError | None]


def create_many(engine: Engine, specs: Iterable[CreateSpec]) -> list[AsyncTask | AsyncBookError]:
    """``create`` for each spec, in one pipelined round trip (each atomic on its own);
    a spec the book refuses answers its error in its place."""
    results: list[AsyncTask | AsyncBookError | None] = []
    calls: list[tuple[int, str, AsyncTask, list[str], list[str]]] = []
    for spec in specs:
        try:
            calls.append((len(results), spec.id, *engine.create_call(spec)))
        except AsyncBookError as error:
            results.append(error)
            continue
        results.append(None)
    engine.before_write()
    script = engine.scripts.create
    replies: list[Any] = []
    if calls:
        pipe = engine.slot_client().pipeline(transaction=False)
        for _index, _id, _task, keys, args in calls:
            pipe.evalsha(script.sha, len(keys), *keys, *args)
        waits = engine.wait.behind(pipe)  # wait_replicas: WAIT behind the batch
        replies = list(pipe.execute(raise_on_error=False))
        acknowledged = replies.pop() if waits else None
        if any(isinstance(reply, NoScriptError) for reply in replies):
            # Nothing ran where NOSCRIPT came back: EVAL (runs and caches) those again.
            pipe = engine.slot_client().pipeline(transaction=False)
            for (_index, _id, _task, keys, args), reply in zip(calls, replies, strict=True):
                if isinstance(reply, NoScriptError):
                    pipe.eval(script.source, len(keys), *keys, *args)
            engine.wait.behind(pipe)
            again = iter(pipe.execute(raise_on_error=False))
            replies = [next(again) if isinstance(r, NoScriptError) else r for r in replies]
            acknowledged = next(again) if waits else None
        if waits:
            engine.wait.check(acknowledged)
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


def apply_in_script(
    engine: Engine,
    task_id: str,
    items: Sequence[tuple[EventInput | None, str | None]],
    call: tuple[BookScript, str, Sequence[str]],
    name: str | None,
    group_id: str | None,
) -> ScriptedEvents:
    """``RedisBook.apply_in_script``: ``call`` is the script, its key and its ARGV."""
    script, key, args = call
    calls = [
        engine.layout.apply_call(task_id, event, callback_id, full_task=False)
        for event, callback_id in items
    ]
    task_id = utf8(require_string(task_id, "taskId"), "taskId")
    facts = engine.layout.facts
    if facts.get(task_id) is None and isinstance(name, str):
        group = dumps(group_id, "groupId") if isinstance(group_id, str) else ""
        facts.learn(task_id, TaskFacts(name=name, group_json=group))
    k = engine.keys
    keys = [k.task(task_id), k.history(task_id), key, *engine.layout.apply_keys]
    argv = [*args, str(len(calls))]
    for call_keys, call_args, _error in calls:
        keys.append(call_keys[2])
        argv.extend(call_args.argv())
    engine.before_write()
    plan = facts.run(
        task_id,
        [call_args.event for _keys, call_args, _error in calls],
        lambda block, info: ScriptCall("", keys + block, argv + info, script=script),
    )
    reply = engine.run(plan)
    status_of(task_id, reply)
    outcomes = [
        outcome(task_id, answer, error)
        for answer, (_keys, _args, error) in zip(reply[2], calls, strict=True)
    ]
    return ScriptedEvents(text_of(reply[0]), text_of(reply[1]), outcomes)


def apply_many_then(
    engine: Engine,
    items: list[ApplyBatchItem],
    full_task: bool,
    extra: ExtraCall | None,
) -> tuple[list[CallbackResult | AsyncBookError], Any]:
    """The events' results, and the reply of the ``extra`` call run after them in the
    same MULTI/EXEC (None without one; its error as a reply, not raised)."""
    results: list[CallbackResult | AsyncBookError | None] = [None] * len(items)
    calls: list[_Call] = []
    for index, (task_id, event, callback_id) in enumerate(items):
        try:
            calls.append((index, *engine.layout.apply_call(task_id, event, callback_id, full_task)))
        except AsyncBookError as error:
            results[index] = error
    engine.before_write()
    engine.settle()
    node = engine.slot_client()
    _learn_facts(engine, node, calls)
    replies = _run_batch(engine, node, calls, load_script=False, extra=extra)
    extra_reply = replies.pop() if extra is not None else None
    if any(isinstance(reply, NoScriptError) for reply in replies):
        # Redis lost apply.lua (SCRIPT FLUSH, a restart, a failover): every apply call
        # of the transaction failed alike, so the whole batch runs again, in order,
        # behind a SCRIPT LOAD in the same transaction (the extra script too: it must
        # run after the events, and may have run once already, before them).
        replies = _run_batch(engine, node, calls, load_script=True, extra=extra)
        extra_reply = replies.pop() if extra is not None else None
    elif extra is not None and isinstance(extra_reply, NoScriptError):
        # Only the extra script was missing: the events ran; it runs after them.
        extra_reply = _run_batch(engine, node, [], load_script=True, extra=extra)[0]
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
                engine.layout.facts.learn(args.task_id, facts)
                reply = engine.apply_one(keys, args)
            else:
                engine.layout.facts.started(args.task_id, [args.event])
            results[index] = callback_result(args.task_id, reply, shape_error)
        except AsyncBookError as error:
            results[index] = error
    return [r for r in results if r is not None], extra_reply


def _learn_facts(engine: Engine, node: Any, calls: list[_Call]) -> None:
    """Read the facts of the batch's tasks the engine does not know yet, and of those
    ``_ends_followed`` names (one round trip; none when it knows them all, or the events
    are progress reports, which need none)."""
    facts = engine.layout.facts
    unknown = sorted(
        {
            args.task_id
            for _index, _keys, args, _error in calls
            if args.event.type != "progress" and facts.get(args.task_id) is None
        }
        | _ends_followed(engine, calls)
    )
    if not unknown:
        return
    pipe = node.pipeline(transaction=False)
    for task_id in unknown:
        pipe.hmget(engine.keys.task(task_id), *FACT_FIELDS)
    for task_id, fields in zip(unknown, pipe.execute(), strict=True):
        facts.learn(task_id, TaskFacts.of_fields(fields))


def _ends_followed(engine: Engine, calls: list[_Call]) -> set[str]:
    """The known tasks with an end (it needs the keys of the task's last worker, which
    another process may have changed since the book learned it) that a later call of
    the batch would see out of order, were the end refused for facts and sent again
    after the batch: a call on the same task, with the same callback id, or any later
    change when the task is in a group. Their facts are read again, not trusted."""
    facts = engine.layout.facts
    last_of_task: dict[str, int] = {}
    last_of_marker: dict[str, int] = {}
    last_change = -1
    for at, (_index, keys, args, _error) in enumerate(calls):
        last_of_task[args.task_id] = at
        if args.callback_given:
            last_of_marker[keys[2]] = at
        if args.event.type != "progress":
            last_change = at
    followed: set[str] = set()
    for at, (_index, keys, args, _error) in enumerate(calls):
        known = facts.get(args.task_id)
        if args.event.type not in ("succeed", "fail") or known is None:
            continue
        if (
            last_of_task[args.task_id] > at
            or (args.callback_given and last_of_marker[keys[2]] > at)
            or (known.group_json != "" and last_change > at)
        ):
            followed.add(args.task_id)
    return followed


def _run_batch(
    engine: Engine,
    node: Any,
    calls: list[_Call],
    *,
    load_script: bool,
    extra: ExtraCall | None = None,
) -> list[Any]:
    """One MULTI/EXEC of the apply calls (and the extra script call last): they run in
    order, with no script flush or failover between them (a plain pipeline could lose
    one item and run the next).

    Each call's info block also names the workers of the starts before it in the batch
    on the same task: an end after its start needs that worker's keys, and a call
    refused for facts would be sent again only after the transaction, behind the calls
    that followed it (they would run first: out of order)."""
    script = engine.scripts.apply
    starts: dict[str, list[EventArgs]] = {}
    waits = engine.wait.replicas > 0
    # Waiting: MULTI ... EXEC then WAIT, sent by hand on one connection (redis-py's
    # transaction pipeline can put nothing behind its EXEC).
    pipe = node.pipeline(transaction=not waits)
    if waits:
        pipe.execute_command("MULTI")
    loads = 0
    if load_script:
        if calls:
            pipe.script_load(script.source)
            loads += 1
        if extra is not None:
            pipe.script_load(extra[0].source)
            loads += 1
    for _index, keys, args, _error in calls:
        before = starts.setdefault(args.task_id, [])
        block, facts = engine.layout.facts.block(args.task_id, [*before, args.event])
        if args.event.type == "start":
            before.append(args.event)
        pipe.evalsha(script.sha, len(keys) + len(block), *keys, *block, *args.argv(), *facts)
    if extra is not None:
        extra_script, extra_keys, extra_args = extra
        pipe.evalsha(extra_script.sha, len(extra_keys), *extra_keys, *extra_args)
    if not waits:
        return list(pipe.execute(raise_on_error=False))[loads:]
    pipe.execute_command("EXEC")
    pipe.wait(engine.wait.replicas, engine.wait.timeout_ms)
    *queued, executed, acknowledged = pipe.execute(raise_on_error=False)
    if isinstance(executed, Exception):
        # EXECABORT: say why (a Cluster node's MOVED after a failover, as redis-py does).
        raise next((reply for reply in queued if isinstance(reply, MovedError)), executed)
    replies = list(executed)[loads:]
    if not any(isinstance(reply, NoScriptError) for reply in replies):
        engine.wait.check(acknowledged)  # else apply_many sends it again, WAIT behind
    return replies


def end_stalled(
    engine: Engine, now: int | float, limit: int
) -> list[CallbackResult | AsyncBookError]:
    """``RedisBook.end_stalled`` at ``now`` (checked)."""
    count = require_limit(limit, maximum=1_000_000)
    k = engine.keys
    due = engine.client.zrangebyscore(k.stalls, "-inf", now, start=0, num=count, withscores=True)
    if not due:
        return []
    hashes = [k.task(text_of(raw)) for raw, _ in due]
    pipe = engine.slot_client().pipeline(transaction=False)
    for key in hashes:
        pipe.hmget(key, "hbt", "rdl", *FACT_FIELDS)
    settings = pipe.execute()
    results: list[CallbackResult | AsyncBookError] = []
    for (raw, stall_at), (timeout, retry, *facts) in zip(due, settings, strict=True):
        task_id = text_of(raw)
        if timeout is None:
            continue
        engine.layout.facts.learn(task_id, TaskFacts.of_fields(facts))
        event = stall_event(now, int(timeout), text_of(retry or b"0") == "1")
        keys, args, _ = engine.layout.apply_call(
            task_id, event, f"stalled:{task_id}:{int(stall_at)}", only_if_stalled=True
        )
        reply = engine.apply_one(keys, args)
        if text_of(reply[0]) == ScriptStatus.FRESH:
            continue
        try:
            results.append(callback_result(task_id, reply, None))
        except AsyncBookError as error:
            results.append(error)
    return results


def prune(engine: Engine, limit: int) -> int:
    """``RedisBook.prune`` (for a book with a retention)."""
    count = require_limit(limit, maximum=1_000_000)
    k = engine.keys
    client = engine.slot_client()
    indexes = [k.state_index(state) for state in GROUP_END_STATES]
    names = [text_of(raw) for raw in client.zrange(k.names, 0, -1)]
    indexes += [k.name_index(state, name) for name in names for state in GROUP_END_STATES]
    # A worker unseen for a week is forgotten, with its index and counts.
    cutoff = f"({engine.run(server_time()) - WORKER_KEEP_MS}"
    for raw in client.zrangebyscore(k.workers, "-inf", cutoff):
        worker = text_of(raw)
        client.delete(k.worker_tasks(worker), k.worker_counts(worker))
        client.zrem(k.workers, worker)
    indexes += [k.worker_tasks(text_of(raw)) for raw in client.zrange(k.workers, 0, -1)]
    pipe = client.pipeline(transaction=False)
    prune_from = engine.prune_from
    for index in indexes:
        low = prune_from.get(index, "-inf")
        pipe.zrangebyscore(index, low, "+inf", start=0, num=count, withscores=True)
    dropped = 0
    for index, rows in zip(indexes, pipe.execute(), strict=True):
        if len(rows) < count:
            prune_from.pop(index, None)
        else:
            prune_from[index] = f"({int(rows[-1][1])}"
        ids = [text_of(raw_id) for raw_id, _ in rows]
        if ids:
            keys = [index, *(k.task(task_id) for task_id in ids)]
            dropped += int(engine.scripts.prune(keys=keys, args=TaskIdsArgs(tuple(ids)).argv()))
    return dropped + _prune_sort_indexes(engine, count)


def _prune_sort_indexes(engine: Engine, count: int) -> int:
    """``prune`` of the sort indexes: they hold ties (many tasks with one attempt), so
    each is walked by rank, resuming at the rank the previous call reached."""
    k = engine.keys
    client = engine.slot_client()
    dropped = 0
    for index in k.sort_indexes:
        start = int(engine.prune_from.get(index, "0"))
        ids = [text_of(raw) for raw in client.zrange(index, start, start + count - 1)]
        gone = 0
        if ids:
            keys = [index, *(k.task(task_id) for task_id in ids)]
            gone = int(engine.scripts.prune(keys=keys, args=TaskIdsArgs(tuple(ids)).argv()))
        if len(ids) < count:
            engine.prune_from.pop(index, None)
        else:
            engine.prune_from[index] = str(start + len(ids) - gone)
        dropped += gone
    return dropped
