"""One shard's plans for many calls at once: pipelined creates, batches of events in one
MULTI/EXEC (with a script of the caller's after them), events inside a script of the
caller's, the sweep's stall fails and the index prune.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from redis.exceptions import ResponseError

from .._book import CreateSpec, EventInput
from .._checks import require_limit, require_string
from .._machine import stall_event
from .._models import GROUP_END_STATES, AsyncTask, CallbackResult
from ..errors import AsyncBookError, DamagedRecordError
from . import _operations as operations
from ._args import dumps, utf8, utf8_args
from ._console import WORKER_KEEP_MS
from ._creating import create_args, created_on
from ._facts import FIELDS as FACT_FIELDS
from ._facts import TRIES as FACT_TRIES
from ._facts import TaskFacts, facts_of
from ._indexer import catch_up
from ._plan import SETTLE, Pipeline, Plan, ScriptCall, Scripts, command, server_time
from ._replies import callback_result, outcome, script_error, status_of, text_of
from ._script_args import ApplyArgs, CreateArgs, TaskIdsArgs
from ._scripts import BookScript, ScriptedEvents, ScriptStatus
from ._shard import Shard

__all__ = [
    "ApplyBatchItem",
    "apply_in_script",
    "apply_many_then",
    "create_many",
    "end_stalled",
    "prune",
]

ApplyBatchItem = tuple[Any, EventInput | None, Any]
"""(task id, event or None to expire at the deadline, callback id)."""
_Call = tuple[int, list[str], ApplyArgs, AsyncBookError | None]


def create_many(
    shard: Shard, specs: Iterable[CreateSpec]
) -> Plan[list[AsyncTask | AsyncBookError]]:
    """``_batch_ops.create_many`` on one shard: one pipelined round trip."""
    results: list[AsyncTask | AsyncBookError | None] = []
    calls: list[tuple[int, str, AsyncTask, list[str], CreateArgs]] = []
    for spec in specs:
        try:
            calls.append((len(results), spec.id, *create_args(shard, spec)))
            results.append(None)
        except AsyncBookError as error:
            results.append(error)
    yield from operations.before_write(shard)
    replies = yield Scripts([ScriptCall("create", keys, args.argv()) for *_, keys, args in calls])
    for (index, task_id, task, _keys, args), reply in zip(calls, replies, strict=True):
        if isinstance(reply, ResponseError) and not script_error(reply):
            raise reply  # the server refused the call (OOM, READONLY): retry the batch
        try:
            if isinstance(reply, ResponseError):
                raise DamagedRecordError(task_id, str(reply))
            results[index] = created_on(shard, task_id, task, reply, args)
        except AsyncBookError as error:
            results[index] = error
    return [result for result in results if result is not None]


def apply_in_script(
    shard: Shard,
    task_id: str,
    items: Sequence[tuple[EventInput | None, str | None]],
    call: tuple[BookScript, str, Sequence[str]],
    name: str | None,
    group_id: str | None,
) -> Plan[ScriptedEvents]:
    """``RedisBook.apply_in_script``: ``call`` is the script, its key and its ARGV."""
    script, key, args = call
    calls = [
        shard.apply_call(task_id, event, callback_id, full_task=False)
        for event, callback_id in items
    ]
    task_id = utf8(require_string(task_id, "taskId"), "taskId")
    facts = shard.facts
    if facts.get(task_id) is None and isinstance(name, str):
        group = dumps(group_id, "groupId") if isinstance(group_id, str) else ""
        facts.learn(task_id, TaskFacts(name=name, group_json=group))
    k = shard.keys
    markers = [call_keys[2] for call_keys, _args, _error in calls]
    also = [key for _keys, call, _error in calls for key in call.marker_hash]
    slots = [str(len(calls))]
    for _keys, call_args, _error in calls:
        slots += call_args.argv()
    # The caller's script: its key and ARGV go as given, the book's own as the driver
    # sends a book script's (``_driver.script_texts``: UTF-8).
    keys = [*utf8_args([k.task(task_id), k.history(task_id)]), key]
    keys += utf8_args([*shard.apply_keys, *markers])
    argv = [*args, *utf8_args(slots)]
    yield from operations.before_write(shard)
    reply = yield from facts.run(
        task_id,
        lambda block, info: ScriptCall(
            script.name, keys + utf8_args(block + also), argv + utf8_args(info), script=script
        ),
    )
    status_of(task_id, reply)
    outcomes = [
        outcome(task_id, answer, error)
        for answer, (_keys, _args, error) in zip(reply[2], calls, strict=True)
    ]
    return ScriptedEvents(text_of(reply[0]), text_of(reply[1]), outcomes)


def apply_many_then(
    shard: Shard,
    items: list[ApplyBatchItem],
    full_task: bool,
    extra: ScriptCall | None,
) -> Plan[tuple[list[CallbackResult | AsyncBookError], Any]]:
    """The events' results, and the reply of the ``extra`` call (a caller's script) run
    after them in the same MULTI/EXEC (None without one; its error as a reply, not raised).

    A call refused for facts (the record's differ from what the book knew: another
    process started the task, or a create that stored nothing) halts the batch: the
    calls after it write nothing (``!after``, apply.lua), and from it on they go again,
    in order, in a next transaction with the facts it answered; so no call runs before
    one the batch put ahead of it (a callback id, a task or a group they share)."""
    results: list[CallbackResult | AsyncBookError | None] = [None] * len(items)
    calls: list[_Call] = []
    for index, (task_id, event, callback_id) in enumerate(items):
        try:
            calls.append((index, *shard.apply_call(task_id, event, callback_id, full_task)))
        except AsyncBookError as error:
            results[index] = error
    yield from operations.before_write(shard)
    yield SETTLE
    # The facts of the tasks the shard does not know yet, read in one round trip (none
    # when it knows them all, or the events are progress reports, which need none).
    facts = shard.facts
    unknown = sorted(
        {
            args.task_id
            for _index, _keys, args, _error in calls
            if args.event.type != "progress" and facts.get(args.task_id) is None
        }
    )
    if unknown:
        read = yield Pipeline([command("hmget", shard.keys.task(i), *FACT_FIELDS) for i in unknown])
        for task_id, fields in zip(unknown, read, strict=True):
            facts.learn(task_id, TaskFacts.of_fields(fields))
    batch = _batch_calls(shard, calls) + ([] if extra is None else [extra])
    replies = list((yield Scripts(batch, transaction=True)))
    extra_reply = replies.pop() if extra is not None else None
    if isinstance(extra_reply, ResponseError) and not script_error(extra_reply):
        raise extra_reply  # the server refused the whole batch: retry it
    refusals: dict[int, int] = {}
    while calls := _answered(shard, calls, replies, results, refusals):
        replies = list((yield Scripts(_batch_calls(shard, calls), transaction=True)))
    return [r for r in results if r is not None], extra_reply


def _answered(
    shard: Shard,
    calls: list[_Call],
    replies: list[Any],
    results: list[CallbackResult | AsyncBookError | None],
    refusals: dict[int, int],
) -> list[_Call]:
    """The batch's replies read into ``results``; the calls to send again, in order: the
    one refused for facts (now learned) and those after it (``!after``)."""
    again: list[_Call] = []
    for call, reply in zip(calls, replies, strict=True):
        index, _keys, args, shape_error = call
        if isinstance(reply, ResponseError) and not script_error(reply):
            raise reply  # the server refused the whole batch (OOM, READONLY): retry it
        if isinstance(reply, ResponseError):
            results[index] = DamagedRecordError(args.task_id, str(reply))
            continue
        if isinstance(reply, list) and reply and text_of(reply[0]) == ScriptStatus.AFTER:
            again.append(call)
            continue
        facts = facts_of(reply)
        if facts is not None:
            shard.facts.learn(args.task_id, facts)
            refusals[index] = refusals.get(index, 0) + 1
            if refusals[index] < FACT_TRIES:
                again.append(call)
            else:
                why = "its group changed at every try"
                results[index] = DamagedRecordError(args.task_id, why)
            continue
        try:
            results[index] = callback_result(args.task_id, reply, shape_error)
        except AsyncBookError as error:
            results[index] = error
    return again


def _batch_calls(shard: Shard, calls: list[_Call]) -> list[ScriptCall]:
    """The apply calls of one MULTI/EXEC: they run in order, with no script flush or
    failover between them (a plain pipeline could lose one item and run the next).
    Each call of a batch of several names the batch's own halt key after its block, the
    last call twice (apply.lua)."""
    batch: list[ScriptCall] = []
    halt = [shard.keys.batch_halt(uuid.uuid4().hex)] if len(calls) > 1 else []
    last = len(calls) - 1
    for at, (_index, keys, args, _error) in enumerate(calls):
        block, facts = shard.facts.block(args.task_id)
        call_keys = [*keys, *block, *args.marker_hash, *halt, *(halt if at == last else ())]
        batch.append(ScriptCall("apply", call_keys, [*args.argv(), *facts]))
    return batch


def end_stalled(
    shard: Shard, now: int | float, limit: int
) -> Plan[list[CallbackResult | AsyncBookError]]:
    """``RedisBook.end_stalled`` at ``now`` (checked)."""
    count = require_limit(limit, maximum=1_000_000)
    k = shard.keys
    due = yield command("zrangebyscore", k.stalls, "-inf", now, start=0, num=count, withscores=True)
    if not due:
        return []
    settings = yield Pipeline(
        [command("hmget", k.task(text_of(raw)), "hbt", "rdl", *FACT_FIELDS) for raw, _ in due]
    )
    results: list[CallbackResult | AsyncBookError] = []
    for (raw, stall_at), (timeout, retry, *facts) in zip(due, settings, strict=True):
        task_id = text_of(raw)
        if timeout is None:
            continue
        shard.facts.learn(task_id, TaskFacts.of_fields(facts))
        event = stall_event(now, int(timeout), text_of(retry or b"0") == "1")
        keys, args, _ = shard.apply_call(
            task_id, event, f"stalled:{task_id}:{int(stall_at)}", only_if_stalled=True
        )
        reply = yield from operations.apply_one(shard, keys, args)
        if text_of(reply[0]) == ScriptStatus.FRESH:
            continue
        try:
            results.append(callback_result(task_id, reply, None))
        except AsyncBookError as error:
            results.append(error)
    return results


def prune(shard: Shard, limit: int) -> Plan[int]:
    """``RedisBook.prune`` (for a book with a retention)."""
    count = require_limit(limit, maximum=1_000_000)
    yield from catch_up(shard)  # the changes of tasks gone are indexed, then pruned
    k = shard.keys
    indexes = [k.state_index(state) for state in GROUP_END_STATES]
    names = [text_of(raw) for raw in (yield command("zrange", k.names, 0, -1))]
    indexes += [k.name_index(state, name) for name in names for state in GROUP_END_STATES]
    # A worker unseen for a week is forgotten, with its index and counts.
    cutoff = f"({(yield from server_time()) - WORKER_KEEP_MS}"
    for raw in (yield command("zrangebyscore", k.workers, "-inf", cutoff)):
        worker = text_of(raw)
        yield command("delete", k.worker_tasks(worker), k.worker_counts(worker))
        yield command("zrem", k.workers, worker)
    indexes += [k.worker_tasks(text_of(raw)) for raw in (yield command("zrange", k.workers, 0, -1))]
    prune_from = shard.prune_from
    pages = yield Pipeline(
        [
            command(
                "zrangebyscore",
                index,
                prune_from.get(index, "-inf"),
                "+inf",
                start=0,
                num=count,
                withscores=True,
            )
            for index in indexes
        ]
    )
    dropped = 0
    for index, rows in zip(indexes, pages, strict=True):
        if len(rows) < count:
            prune_from.pop(index, None)
        else:
            prune_from[index] = f"({int(rows[-1][1])}"
        ids = [text_of(raw_id) for raw_id, _ in rows]
        if ids:
            dropped += yield from _prune_ids(shard, index, ids)
    # The sort indexes hold ties (many tasks with one attempt): each is walked by rank,
    # resuming at the rank the previous call reached.
    for index in k.sort_indexes:
        start = int(prune_from.get(index, "0"))
        ids = [text_of(raw) for raw in (yield command("zrange", index, start, start + count - 1))]
        gone = (yield from _prune_ids(shard, index, ids)) if ids else 0
        if len(ids) < count:
            prune_from.pop(index, None)
        else:
            prune_from[index] = str(start + len(ids) - gone)
        dropped += gone
    return dropped


def _prune_ids(shard: Shard, index: str, ids: list[str]) -> Plan[int]:
    """prune.lua for these ids of ``index``: how many it dropped."""
    keys = [index, *(shard.keys.task(task_id) for task_id in ids)]
    return int((yield ScriptCall("prune", keys, TaskIdsArgs(tuple(ids)).argv())))
