"""``RedisBook.expire_many``: many tasks expired at their deadlines, ``CHUNK`` per
expire_many.lua call (the sweep's batches).

The script applies each expiry with apply.lua's ``apply_event``, so every task gets the
answer, writes and notification ``expire`` gives it; what differs is the transport:
one script call for the chunk instead of one EVALSHA per task, and one info block per
distinct set of facts (name, group, worker, deadline hour) instead of one per task.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from redis.exceptions import ResponseError

from .._checks import require_string
from .._models import CallbackResult
from ..errors import AsyncBookError, DamagedRecordError
from . import _operations as operations
from ._args import utf8
from ._facts import FactBook, TaskFacts, facts_of, info_block
from ._plan import SETTLE, Plan, ScriptCall
from ._replies import callback_result, outcome, script_error
from ._script_args import expiry_slots
from ._scripts import EventOutcome
from ._shard import Shard

__all__ = ["CHUNK", "COMPACT", "expire_many"]

CHUNK = 1000
"""Tasks per script call (a script holds the server while it runs)."""
COMPACT = "c"
"""``full_task`` for apply_event's compact answers, read by ``outcome``: no task built."""


def expire_many(
    shard: Shard, task_ids: Iterable[Any], full_task: bool | str
) -> Plan[list[CallbackResult | EventOutcome | AsyncBookError]]:
    """Each task expired at its deadline, in order; an id the book refuses, or a task it
    cannot expire, answers its error in its place."""
    given = list(task_ids)
    results: list[CallbackResult | EventOutcome | AsyncBookError | None] = [None] * len(given)
    ids: list[tuple[int, str]] = []
    for index, task_id in enumerate(given):
        try:
            ids.append((index, utf8(require_string(task_id, "taskId"), "taskId")))
        except AsyncBookError as error:
            results[index] = error
    yield from operations.before_write(shard)
    yield SETTLE
    for at in range(0, len(ids), CHUNK):
        chunk = ids[at : at + CHUNK]
        answers = yield from _expire_chunk(shard, [task_id for _index, task_id in chunk], full_task)
        for (index, _task_id), result in zip(chunk, answers, strict=True):
            results[index] = result
    return [result for result in results if result is not None]


def _expire_chunk(
    shard: Shard, ids: Sequence[str], full_task: bool | str
) -> Plan[list[CallbackResult | EventOutcome | AsyncBookError]]:
    """expire_many.lua's answers for these tasks, read. A task whose facts the book does
    not know goes with a block of none (a task without a name, group or worker, due in
    the last hour, needs none); the script answers ``!facts`` for those it lacks, having
    written nothing for them, and they go again, together, with the facts it gave."""
    answers = yield from _send(shard, ids, full_task)
    again = [n for n, answer in enumerate(answers) if _learned(shard.facts, ids[n], answer)]
    if again:
        sent = yield from _send(shard, [ids[n] for n in again], full_task)
        for n, answer in zip(again, sent, strict=True):
            answers[n] = answer
    results: list[CallbackResult | EventOutcome | AsyncBookError] = []
    read = outcome if full_task == COMPACT else callback_result
    for task_id, answer in zip(ids, answers, strict=True):
        if isinstance(answer, ResponseError):
            if not script_error(answer):
                raise answer  # the server refused the call (OOM, READONLY): retry it
            results.append(DamagedRecordError(task_id, str(answer)))
            continue
        try:
            if _learned(shard.facts, task_id, answer):
                # Its record changed since the last answer: this task again, alone.
                one_keys, one_args, _ = shard.apply_call(task_id, None, None, full_task)
                answer = yield from operations.apply_one(shard, one_keys, one_args)
            results.append(read(task_id, answer, None))
        except AsyncBookError as error:
            results.append(error)
    return results


def _learned(facts: FactBook, task_id: str, answer: Any) -> bool:
    """True for a ``!facts`` answer, whose facts the book now knows."""
    learned = None if isinstance(answer, ResponseError) else facts_of(answer)
    if learned is not None:
        facts.learn(task_id, learned)
    return learned is not None


def _send(shard: Shard, ids: Sequence[str], full_task: bool | str) -> Plan[list[Any]]:
    """One expire_many.lua call for these tasks: its answers, one per task."""
    k = shard.keys
    shapes: dict[str, int] = {}
    blocks: list[tuple[int, Sequence[str]]] = []
    block_keys: list[str] = []
    task_keys: list[str] = []
    tasks: list[tuple[str, int]] = []
    for task_id in ids:
        facts = shard.facts.get(task_id) or TaskFacts()
        number = shapes.get(facts.group_json)
        if number is None:
            keys, argv = info_block(k, task_id, facts)
            number = shapes[facts.group_json] = len(blocks) + 1
            blocks.append((len(keys), argv))
            block_keys += keys
        tasks.append((task_id, number))
        task_keys += (k.task(task_id), k.history(task_id), k.info(task_id))
    # The slots apply.lua gets for an expiry at the deadline, less the task id.
    _keys, event, _error = shard.apply_call(ids[0], None, None, full_task)
    event = dataclasses.replace(event, task_id="")
    keys = [k.callback(""), *shard.apply_keys, *block_keys, *task_keys]
    argv = expiry_slots(blocks, event, tasks).argv()
    return list((yield ScriptCall("expire_many", keys, argv)))
