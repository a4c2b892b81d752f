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
from ._args import utf8
from ._engine import Engine
from ._facts import FIELDS as FACT_FIELDS
from ._facts import TaskFacts, facts_of, hour_of, info_block
from ._replies import callback_result, script_error
from ._scripts import AT_DEADLINE, expiry_slots

__all__ = ["CHUNK", "expire_many"]

CHUNK = 1000
"""Tasks per script call (a script holds the server while it runs)."""


def expire_many(
    engine: Engine, task_ids: Iterable[Any], full_task: bool
) -> list[CallbackResult | AsyncBookError]:
    """Each task expired at its deadline, in order; an id the book refuses, or a task it
    cannot expire, answers its error in its place."""
    results: list[CallbackResult | AsyncBookError | None] = []
    ids: list[tuple[int, str]] = []
    for task_id in task_ids:
        try:
            checked = utf8(require_string(task_id, "taskId"), "taskId")
        except AsyncBookError as error:
            results.append(error)
            continue
        ids.append((len(results), checked))
        results.append(None)
    engine.before_write()
    engine.settle()
    for at in range(0, len(ids), CHUNK):
        chunk = ids[at : at + CHUNK]
        answers = _expire_chunk(engine, [task_id for _index, task_id in chunk], full_task)
        for (index, _task_id), result in zip(chunk, answers, strict=True):
            results[index] = result
    return [result for result in results if result is not None]


def _learn_facts(engine: Engine, ids: Sequence[str]) -> None:
    """Read the facts of the tasks the engine does not know yet (one round trip)."""
    facts = engine.layout.facts
    unknown = sorted({task_id for task_id in ids if facts.get(task_id) is None})
    if not unknown:
        return
    pipe = engine.slot_client().pipeline(transaction=False)
    for task_id in unknown:
        pipe.hmget(engine.keys.task(task_id), *FACT_FIELDS)
    for task_id, fields in zip(unknown, pipe.execute(), strict=True):
        facts.learn(task_id, TaskFacts.of_fields(fields))


def _expire_chunk(
    engine: Engine, ids: Sequence[str], full_task: bool
) -> list[CallbackResult | AsyncBookError]:
    """One expire_many.lua call for these tasks, and its answers read."""
    layout, k = engine.layout, engine.keys
    _learn_facts(engine, ids)
    now = layout.facts.clock()
    shapes: dict[tuple[str, str, str, str], int] = {}
    blocks: list[tuple[int, Sequence[str]]] = []
    block_keys: list[str] = []
    task_keys: list[str] = []
    tasks: list[tuple[str, int]] = []
    for task_id in ids:
        facts = layout.facts.get(task_id) or TaskFacts()
        hour = hour_of(float(facts.deadline)) if facts.deadline else ""
        shape = (facts.name, facts.group_json, facts.worker, hour)
        number = shapes.get(shape)
        if number is None:
            keys, argv = info_block(k, task_id, facts, [AT_DEADLINE], now)
            number = shapes[shape] = len(blocks) + 1
            blocks.append((len(keys), argv))
            block_keys += keys
        tasks.append((task_id, number))
        task_keys += (k.task(task_id), k.history(task_id), k.info(task_id))
    # The slots apply.lua gets for an expiry at the deadline, less the task id.
    _keys, event, _error = layout.apply_call(ids[0], None, None, full_task)
    event = dataclasses.replace(event, task_id="")
    keys = [k.callback(""), *layout.apply_keys, *block_keys, *task_keys]
    reply = engine.scripts.expire_many(keys=keys, args=expiry_slots(blocks, event, tasks).argv())
    results: list[CallbackResult | AsyncBookError] = []
    for task_id, answer in zip(ids, reply, strict=True):
        if isinstance(answer, ResponseError):
            if not script_error(answer):
                raise answer  # the server refused the call (OOM, READONLY): retry it
            results.append(DamagedRecordError(task_id, str(answer)))
            continue
        try:
            learned = facts_of(answer)
            if learned is not None:
                # Its record changed since _learn_facts read it: this task again, alone.
                layout.facts.learn(task_id, learned)
                one_keys, one_args, _ = layout.apply_call(task_id, None, None, full_task)
                answer = engine.apply_one(one_keys, one_args)
            results.append(callback_result(task_id, answer, None))
        except AsyncBookError as error:
            results.append(error)
    return results
