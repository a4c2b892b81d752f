"""``RedisBook.expire_many``: many tasks expired at their deadlines, ``CHUNK`` per
expire_many.lua call (the sweep's batches).

The script applies each expiry with apply.lua's ``apply_event``, so every task gets the
answer, writes and notification ``expire`` gives it; what differs is the transport:
one script call for the chunk instead of one EVALSHA per task, and one info block per
distinct set of facts (name, group, worker, deadline hour) instead of one per task.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple, TypeVar

import redis
from redis.exceptions import ResponseError

from .._checks import require_string
from .._models import CallbackResult
from ..errors import AsyncBookError, DamagedRecordError
from . import _operations as operations
from ._args import utf8
from ._driver import answered, queued
from ._facts import FactBook, TaskFacts, facts_of, info_block
from ._keys import escape_id
from ._lane import packed
from ._plan import SETTLE, Plan, ScriptCall
from ._replies import callback_result, outcome, script_error, text_of
from ._script_args import ApplyArgs, AuditArgs, expiry_slots
from ._scripts import EventOutcome
from ._shard import Shard

__all__ = [
    "CHUNK",
    "COMPACT",
    "Resend",
    "expire_call",
    "expire_many",
    "in_chunks",
    "many_call",
    "overlapped",
    "overlaps",
    "read_chunk",
]


_A = TypeVar("_A")
CHUNK = 1000
"""Tasks per script call (a script holds the server while it runs)."""
Tally = Callable[[int, Sequence[Any]], bool]
"""Counts a batch of the sweep (its size, its results); False: send no more."""
COMPACT = "c"
"""``full_task`` for apply_event's compact answers, read by ``outcome``: no task built."""


def expire_many(
    shard: Shard, task_ids: Iterable[Any], full_task: bool | str
) -> Plan[list[CallbackResult | EventOutcome | AsyncBookError]]:
    """Each task expired at its deadline, in order; an id the book refuses, or a task it
    cannot expire, answers its error in its place."""
    return (yield from in_chunks(shard, task_ids, lambda ids: _expire_chunk(shard, ids, full_task)))


def in_chunks(
    shard: Shard, task_ids: Iterable[Any], run: Callable[[list[str]], Plan[list[_A]]]
) -> Plan[list[_A | AsyncBookError]]:
    """``run``'s answers for these tasks' ids, ``CHUNK`` at a time, in order, after what
    runs before a write; an id the book refuses answers its error in its place."""
    given = list(task_ids)
    results: list[_A | AsyncBookError | None] = [None] * len(given)
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
        answers = yield from run([task_id for _index, task_id in chunk])
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
    answers = list((yield expire_call(shard, ids, full_task)))
    return (yield from read_chunk(shard, ids, answers, full_task))


def read_chunk(
    shard: Shard,
    ids: Sequence[str],
    answers: list[Any],
    full_task: bool | str,
    how: Resend | None = None,
) -> Plan[list[CallbackResult | EventOutcome | AsyncBookError]]:
    """The answers of an expire_many.lua call for these tasks, read (``_expire_chunk``;
    ``how``: another script's call and its answer for a task alone, cancel_many.lua's).
    Compact answers alike (the same reason, flags and state, no error) are read once."""
    if how is None:
        how = Resend(
            lambda again: expire_call(shard, again, full_task),
            lambda task_id, full: operations.apply_one(
                shard, *shard.apply_call(task_id, None, None, full)[:2]
            ),
        )
    again = [n for n, answer in enumerate(answers) if _learned(shard.facts, ids[n], answer)]
    if again:
        sent = yield how.call([ids[n] for n in again])
        for n, answer in zip(again, sent, strict=True):
            answers[n] = answer
    results: list[CallbackResult | EventOutcome | AsyncBookError] = []
    read = outcome if full_task == COMPACT else callback_result
    alike: dict[tuple[Any, ...] | None, EventOutcome] = {}
    sent_again = set(again)
    for n, (task_id, answer) in enumerate(zip(ids, answers, strict=True)):
        if isinstance(answer, ResponseError):
            if not script_error(answer):
                raise answer  # the server refused the call (OOM, READONLY): retry it
            results.append(DamagedRecordError(task_id, str(answer)))
            continue
        try:
            if n in sent_again and _learned(shard.facts, task_id, answer):
                # Its record changed since the last answer: this task again, alone.
                answer = yield from how.alone(task_id, full_task)
            shape = tuple(answer) if read is outcome and len(answer) == 4 else None
            result: CallbackResult | EventOutcome | AsyncBookError | None = alike.get(shape)
            if result is None:
                result = read(task_id, answer, how.shape_error)
                if shape and not answer[3] and isinstance(result, EventOutcome):
                    alike[shape] = result
            results.append(result)
        except AsyncBookError as error:
            results.append(error)
    return results


def _learned(facts: FactBook, task_id: str, answer: Any) -> bool:
    """True for a ``!facts`` answer, whose facts the book now knows."""
    learned = None if isinstance(answer, ResponseError) else facts_of(answer)
    if learned is not None:
        facts.learn(task_id, learned)
    return learned is not None


class Resend(NamedTuple):
    """How a chunk's tasks refused for facts go again (``read_chunk``): together, by
    ``call`` (their ids), and a task refused again, alone (``alone``: its reply)."""

    call: Callable[[Sequence[str]], ScriptCall]
    alone: Callable[[str, bool | str], Plan[Any]]
    shape_error: AsyncBookError | None = None
    """The event's shape error (a cancel's bad reason): a ``!shape`` answer raises it."""


def expire_call(shard: Shard, ids: Sequence[str], full_task: bool | str) -> ScriptCall:
    """One expire_many.lua call for these tasks (it answers one reply per task)."""
    # The slots apply.lua gets for an expiry at the deadline, less the task id.
    _keys, event, _error = shard.apply_call(ids[0], None, None, full_task)
    return many_call(shard, ids, dataclasses.replace(event, task_id=""))


def many_call(
    shard: Shard, ids: Sequence[str], event: ApplyArgs, audit: AuditArgs | None = None
) -> ScriptCall:
    """One call applying ``event`` (its task id blank) to each of these tasks:
    expire_many.lua's, or with ``audit`` cancel_many.lua's (each task's audit list after
    its keys, the namespace's log after the shared ones)."""
    k = shard.keys
    shapes: dict[str, int] = {}
    blocks: list[tuple[int, Sequence[str]]] = []
    block_keys: list[str] = []
    task_keys: list[str] = []
    # Each task's keys: the kinds' prefixes (``_per_id``) and its id escaped, once.
    task, history, info, trail = k.task(""), k.history(""), k.info(""), k.task_audit("")
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
        escaped = escape_id(task_id)
        task_keys += (task + escaped, history + escaped, info + escaped)
        if audit is not None:
            task_keys.append(trail + escaped)
    shared = [k.callback(""), *shard.apply_keys] + ([] if audit is None else [k.audit_log])
    argv = list(expiry_slots(blocks, event, tasks, audit))
    name = "expire_many" if audit is None else "cancel_many"
    return ScriptCall(name, [*shared, *block_keys, *task_keys], argv)


def first_due(shard: Shard, now_ms: int | float, limit: int) -> Plan[list[str]]:
    """What runs before the sweep's first expiry (``expire_many``'s), then the due ids."""
    yield from operations.before_write(shard)
    yield SETTLE
    return (yield from operations.overdue(shard, now_ms, limit))


def overlaps(engine: Any) -> bool:
    """Whether ``overlapped`` can run on this shard's engine: a lane (``_lane``) that
    goes straight to a connection for FCALL and EVALSHA, and no replica wait."""
    lane = engine.lane
    return lane is not None and not engine.wait.replicas and lane.direct("fcall", "evalsha")


def overlapped(
    engine: Any, due: list[str], now_ms: int | float, batch: int, most: int, tally: Tally
) -> bool:
    """The sweep's expiries on one shard (``due``: its first ``2 * batch`` due ids), each
    call sent before the last one's answer is read: Redis runs one batch while the
    client reads the one before and builds the next. Each call goes with a read of the
    due ids as they stand after it runs, and before the next runs: the next batch is the
    first of those this sweep has not sent (a task answered ``!facts`` goes again in
    ``read_chunk``). ``tally`` counts each batch's answers (its size, its results) and
    says whether to go on. A call is answered as one sent alone (``answered``). False
    when the connection failed, or a call did not run (the due ids read after it are
    stale): the rest goes batch by batch."""
    shard = engine.layout
    ahead = (shard.keys.deadlines, "-inf", now_ms, "LIMIT", 0, 3 * batch)
    try:
        connection = engine.lane.pool.get_connection()
    except (redis.ConnectionError, redis.TimeoutError):
        return False  # the rest goes batch by batch, as the driver runs it (an outage)
    flight: deque[tuple[list[str], ScriptCall, bool]] = deque()
    taken = {task_id.encode() for task_id in due[: 2 * batch]}

    def send(ids: list[str]) -> None:
        call = expire_call(shard, ids, COMPACT)
        read_ahead = len(ids) == batch and sent + 1 < most
        sent_as = (queued(engine, call) or [])[0]
        parts = packed(connection, sent_as.name.upper(), *sent_as.args)
        if read_ahead:
            parts += packed(connection, "ZRANGEBYSCORE", *ahead)
        connection.send_packed_command(parts)
        flight.append((ids, call, read_ahead))

    def reply(**options: Any) -> Any:
        try:
            return connection.read_response(**options)
        except ResponseError as error:  # the call's own refusal: ``answered`` reads it
            return error

    sent, going, ran = 0, True, True
    try:
        for ids in (due[:batch], due[batch : 2 * batch]):
            if ids and going and sent < most:
                send(ids)
                sent, going = sent + 1, len(ids) == batch
        while flight:
            ids, call, read_ahead = flight.popleft()
            answer = reply()
            ran = ran and not isinstance(answer, ResponseError)
            rows = reply(disable_decoding=True) if read_ahead else []
            if isinstance(rows, ResponseError):
                raise rows
            fresh = [raw for raw in rows if raw not in taken][:batch]
            if fresh and going and ran and sent < most:
                taken.update(fresh)
                send([text_of(raw) for raw in fresh])
                sent, going = sent + 1, len(fresh) == batch
            answer, error = answered(engine, call, [answer])
            if error is not None:
                raise error
            going = tally(len(ids), engine.run(read_chunk(shard, ids, answer, COMPACT))) and going
    except (redis.ConnectionError, redis.TimeoutError):
        connection.disconnect()
        return False
    finally:
        if flight:
            connection.disconnect()  # replies unread: never handed on
        engine.lane.pool.release(connection)
    return ran
