"""A book's calls about tasks, written once as namespace plans (``_merged``): the same
code for one shard or many, run by the sync and the asyncio driver alike.

A call about one task runs in its shard, one script call as the shard's plan makes it
(``_operations``, ``_audit``). A callback id or idempotency key that lives in another
shard is claimed there first (``_claims``); a member's end in a namespace of several
shards is followed by its group's check (``_groups``). Batches run a plan per shard, the
shards at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .._book import ApplyItem, CreateSpec, EventInput
from .._checks import require_integer, require_non_negative, require_string, require_text
from .._jsrules import is_blank
from .._models import (
    GROUP_END_STATES,
    AsyncTask,
    CallbackResult,
    DeliveryResult,
    GroupSummary,
    ResumeResult,
)
from ..errors import AsyncBookError, DamagedRecordError
from . import _audit as audits
from . import _batches as batches
from . import _claims as claims
from . import _expiries as expiries
from . import _groups as groups
from . import _operations as operations
from ._args import dumps, number_text, utf8
from ._merged import FIX_COUNT, MergedPlan, OnShards, Sleep, on
from ._namespace import Namespace
from ._plan import Plan, ScriptCall, server_time
from ._replies import group_summary_of
from ._script_args import SealGroupArgs, TaskIdsArgs
from ._scripts import BookScript, ScriptedEvents

__all__ = [
    "apply",
    "apply_in_script",
    "apply_many",
    "apply_many_then",
    "cancel",
    "create",
    "create_many",
    "deliver_result",
    "end_stalled",
    "expire",
    "expire_many",
    "heartbeat",
    "record_audit",
    "seal_group",
]

Outcome = CallbackResult | AsyncBookError

_RELEASED_ON = ("invalid-request", "damaged", "conflict")
"""The codes of an apply that surely wrote nothing: its claim is released."""

_TAKEN_CHECKS = 20
"""How often a claim held by another task without its marker is read again (every
``_TAKEN_PAUSE`` s) before the id is taken as that task's."""
_TAKEN_PAUSE = 0.01


def create(ns: Namespace, spec: CreateSpec) -> MergedPlan[AsyncTask]:
    """create.lua in the task's shard."""
    if ns.count > 1:
        yield FIX_COUNT
    index = ns.index_of(spec.id)
    return (yield from on(index, operations.create(ns.shards[index], spec)))


def create_many(
    ns: Namespace, specs: Iterable[CreateSpec]
) -> MergedPlan[list[AsyncTask | AsyncBookError]]:
    """Each shard's creates in one pipelined round trip, the shards at once; answers in
    the specs' order."""
    if ns.count > 1:
        yield FIX_COUNT
    given = list(specs)
    parts = ns.by_shard([spec.id for spec in given])
    return (
        yield from _spread(
            ns,
            parts,
            lambda shard, ats: batches.create_many(shard, [given[at] for at in ats]),
            len(given),
        )
    )


def _spread(
    ns: Namespace,
    parts: dict[int, list[int]],
    make: Callable[[Any, list[int]], Plan[list[Any]]],
    size: int,
) -> MergedPlan[list[Any]]:
    """``make(shard, positions)`` on each shard holding any (at once), its answers put
    back at their positions."""
    out: list[Any] = [None] * size
    if not parts:
        return out
    indexes = tuple(parts)
    answers = yield OnShards(tuple(make(ns.shards[i], parts[i]) for i in indexes), indexes, True)
    for index, results in zip(indexes, answers, strict=True):
        for at, result in zip(parts[index], results, strict=True):
            out[at] = result
    return out


# -- claims -------------------------------------------------------------------------


def _claim(ns: Namespace, task_id: str, identifier: str) -> MergedPlan[claims.Claim]:
    """Claim a callback id for ``task_id`` in its home shard (``_claims``)."""
    home = ns.map.home_index(identifier)
    for _ in range(_TAKEN_CHECKS):
        found, holder = yield from on(
            home,
            claims.claim(ns.shards[home].keys, identifier, task_id, ns.shards[home].retention_ms),
        )
        if found != claims.Claim.TAKEN or holder == "":
            return found
        holder_index = ns.index_of(holder)
        if (
            yield from on(
                holder_index,
                claims.is_marked(ns.shards[holder_index].keys, identifier),
                writes=False,
            )
        ):
            return found
        yield Sleep(_TAKEN_PAUSE)
    return claims.Claim.TAKEN


def _release(ns: Namespace, task_id: str, identifier: str) -> MergedPlan[None]:
    home = ns.map.home_index(identifier)
    yield from on(home, claims.release(ns.shards[home].keys, identifier, task_id))


def _claimed(
    ns: Namespace, task_id: str, identifier: str, call: Callable[[bool], MergedPlan[Any]]
) -> MergedPlan[Any]:
    """``call(taken)`` with ``identifier`` claimed for ``task_id``; a claim made here is
    released when the call surely wrote nothing."""
    found = yield from _claim(ns, task_id, identifier)
    if found == claims.Claim.TAKEN:
        return (yield from call(True))
    try:
        return (yield from call(False))
    except AsyncBookError as error:
        if found == claims.Claim.NEW and error.code in _RELEASED_ON:
            yield from _release(ns, task_id, identifier)
        raise


# -- events -------------------------------------------------------------------------


def apply(
    ns: Namespace, task_id: str, event: EventInput, callback_id: str | None
) -> MergedPlan[CallbackResult]:
    """One event in the task's shard (its callback id claimed first when it lives in
    another), then its group's check if it ended a member."""
    if ns.count > 1:
        yield FIX_COUNT
    index = ns.index_of(task_id)
    shard = ns.shards[index]

    def run(taken: bool) -> MergedPlan[CallbackResult]:
        return on(index, operations.apply(shard, task_id, event, callback_id, taken=taken))

    if ns.crosses(task_id, callback_id):
        assert callback_id is not None
        result: CallbackResult = yield from _claimed(ns, task_id, callback_id, run)
    else:
        result = yield from run(False)
    yield from groups.after_ends(ns, index, [result], [task_id], [event])
    return result


def cancel(
    ns: Namespace,
    task_id: str,
    reason: str | None,
    at_ms: int | float | None,
    callback_id: str | None,
    actor: str | None,
) -> MergedPlan[CallbackResult]:
    """A cancel in the task's shard (with its audit entry when ``actor`` is given), then
    its group's check."""
    if ns.count > 1:
        yield FIX_COUNT
    index = ns.index_of(task_id)
    shard = ns.shards[index]

    def run(taken: bool) -> MergedPlan[CallbackResult]:
        if not taken:
            return (
                yield from on(
                    index, audits.cancel(shard, task_id, reason, at_ms, callback_id, actor)
                )
            )
        plan = operations.cancel(shard, task_id, reason, at_ms, callback_id, taken=True)
        answer: CallbackResult = yield from on(index, plan)
        if actor is not None:
            yield from on(
                index, audits.record(shard, task_id, "cancel", actor, reason, answer.reason)
            )
        return answer

    if ns.crosses(task_id, callback_id):
        assert callback_id is not None
        result: CallbackResult = yield from _claimed(ns, task_id, callback_id, run)
    else:
        result = yield from run(False)
    yield from groups.after_ends(ns, index, [result], [task_id])
    return result


def expire(ns: Namespace, task_id: str) -> MergedPlan[CallbackResult]:
    """The task expired at its deadline, then its group's check."""
    if ns.count > 1:
        yield FIX_COUNT
    index = ns.index_of(task_id)
    result = yield from on(index, operations.expire(ns.shards[index], task_id))
    yield from groups.after_ends(ns, index, [result], [task_id])
    return result


def apply_many(
    ns: Namespace, items: Iterable[ApplyItem], full_task: bool
) -> MergedPlan[list[Outcome]]:
    """Each shard's events in one MULTI/EXEC, the shards at once; an event whose
    callback id lives in another shard is claimed there first."""
    if ns.count > 1:
        yield FIX_COUNT
    given: list[ApplyItem] = list(items)
    out: list[Outcome | None] = [None] * len(given)
    parts: dict[int, list[int]] = {}
    claimed: dict[int, claims.Claim] = {}
    for at, (task_id, event, callback) in enumerate(given):
        index = ns.index_of(task_id)
        if ns.crosses(task_id, callback):
            assert callback is not None
            found = yield from _claim(ns, task_id, callback)
            if found == claims.Claim.TAKEN:
                plan = operations.apply(
                    ns.shards[index], task_id, event, callback, full_task=full_task, taken=True
                )
                try:
                    out[at] = yield from on(index, plan)
                except AsyncBookError as error:
                    out[at] = error
                continue
            claimed[at] = found
        parts.setdefault(index, []).append(at)

    def batch(shard: Any, ats: list[int]) -> Plan[list[Outcome]]:
        results, _reply = yield from batches.apply_many_then(
            shard, [given[at] for at in ats], full_task, None
        )
        return results

    spread = yield from _spread(ns, parts, batch, len(given))
    for index, ats in parts.items():
        results = [spread[at] for at in ats]
        ids, events = [given[at][0] for at in ats], [given[at][1] for at in ats]
        yield from groups.after_ends(ns, index, results, ids, events)
        for at, result in zip(ats, results, strict=True):
            out[at] = result
            if (
                isinstance(result, AsyncBookError)
                and claimed.get(at) == claims.Claim.NEW
                and result.code in _RELEASED_ON
            ):
                task_id, _event, callback = given[at]
                assert callback is not None
                yield from _release(ns, task_id, callback)
    return [result for result in out if result is not None]


def apply_many_then(
    ns: Namespace,
    items: Iterable[ApplyItem],
    extra: tuple[BookScript, Sequence[str], Sequence[Any]],
    full_task: bool,
) -> MergedPlan[tuple[list[Outcome], Any]]:
    """``apply_many`` and one more script in one MULTI/EXEC: every item's task must live
    in one shard (one transaction cannot span shards), else ``invalid-request`` naming
    ``items``; the script's keys must be in that shard's slot."""
    if ns.count > 1:
        yield FIX_COUNT
    given = list(items)
    indexes = {ns.index_of(item[0]) for item in given}
    if len(indexes) > 1:
        from ..errors import invalid

        raise invalid(
            "the items' tasks live in several shards: one transaction cannot span them",
            field="items",
        )
    index = indexes.pop() if indexes else 0
    script, keys, args = extra
    call = ScriptCall(script.name, keys, args, script=script)
    plan = batches.apply_many_then(ns.shards[index], list(given), full_task, call)
    results, reply = yield from on(index, plan)
    yield from groups.after_ends(ns, index, results, [item[0] for item in given])
    return results, reply


def apply_in_script(
    ns: Namespace,
    task_id: str,
    items: Sequence[tuple[EventInput | None, str | None]],
    call: tuple[BookScript, str, Sequence[str]],
    name: str | None,
    group_id: str | None,
) -> MergedPlan[ScriptedEvents]:
    """Events of one task inside the caller's script, in the task's shard; then the
    group check when it ended a member (callback ids are the shard's markers)."""
    if ns.count > 1:
        yield FIX_COUNT
    index = ns.index_of(task_id)
    shard = ns.shards[index]
    answer = yield from on(
        index, batches.apply_in_script(shard, task_id, items, call, name, group_id)
    )
    ended = any(not isinstance(each, AsyncBookError) and each.changed for each in answer.outcomes)
    if ns.count > 1 and ended and answer.state in GROUP_END_STATES:
        group = groups.group_of(shard, task_id)
        if group is not None:
            yield from groups.check(ns, group, None)
    return answer


def expire_many(
    ns: Namespace, task_ids: Iterable[Any], full_task: bool
) -> MergedPlan[list[Outcome]]:
    """Each shard's expiries (``CHUNK`` per script call), the shards at once."""
    if ns.count > 1:
        yield FIX_COUNT
    ids = list(task_ids)
    parts = ns.by_shard(ids)
    out = yield from _spread(
        ns,
        parts,
        lambda shard, ats: expiries.expire_many(shard, [ids[at] for at in ats], full_task),
        len(ids),
    )
    for index, ats in parts.items():
        yield from groups.after_ends(ns, index, [out[at] for at in ats], [ids[at] for at in ats])
    return out


def end_stalled(ns: Namespace, now_ms: int | float | None, limit: int) -> MergedPlan[list[Outcome]]:
    """Every shard's overdue heartbeats failed (by the server's clock), the shards at
    once; then the groups of the members that ended."""
    now: int | float
    if now_ms is None:
        now = yield from on(0, server_time(), writes=False)
    else:
        now = require_non_negative(now_ms, "nowMs")
    indexes = tuple(range(ns.count))
    found = yield OnShards(
        tuple(batches.end_stalled(shard, now, limit) for shard in ns.shards), indexes, True
    )
    out: list[Outcome] = []
    for index, results in zip(indexes, found, strict=True):
        ids = ["" if isinstance(r, AsyncBookError) else r.task.id for r in results]
        yield from groups.after_ends(ns, index, results, ids)
        out += results
    return out


def heartbeat(ns: Namespace, task_ids: Iterable[Any]) -> MergedPlan[int]:
    """These tasks' running attempts are alive: one script call per shard."""
    ids = list(task_ids)
    parts = ns.by_shard(ids)
    indexes = tuple(parts)
    plans = tuple(_heartbeat(ns.shards[i], [ids[at] for at in parts[i]]) for i in indexes)
    if not plans:
        return 0
    return sum((yield OnShards(plans, indexes, True)))


def _heartbeat(shard: Any, task_ids: list[Any]) -> Plan[int]:
    ids = [utf8(require_string(task_id, "taskId"), "taskId") for task_id in task_ids]
    if not ids:
        return 0
    k = shard.keys
    keys = [k.stalls, k.workers, *(k.task(task_id) for task_id in ids)]
    return int((yield ScriptCall("heartbeat", keys, TaskIdsArgs(tuple(ids)).argv())))


def record_audit(
    ns: Namespace, task_id: str, action: str, actor: str, reason: str | None, outcome: str
) -> MergedPlan[None]:
    """One audit entry in the task's shard."""
    if ns.count > 1:
        yield FIX_COUNT
    index = ns.index_of(task_id)
    yield from on(index, audits.record(ns.shards[index], task_id, action, actor, reason, outcome))


# -- delivering ---------------------------------------------------------------------


def deliver_result(
    ns: Namespace, task_id: str, idempotency_key: str, now_ms: int | float
) -> MergedPlan[DeliveryResult]:
    """deliver.lua in the task's shard; a key that lives in another shard: the task read
    in its shard first (a succeeded task never changes), then the key decided in its
    home shard."""
    if ns.count > 1:
        yield FIX_COUNT
    index = ns.index_of(task_id)
    shard = ns.shards[index]
    if not ns.map.key_crosses(task_id, idempotency_key) or is_blank(idempotency_key):
        return (
            yield from on(index, operations.deliver_result(shard, task_id, idempotency_key, now_ms))
        )
    key = utf8(idempotency_key, "idempotencyKey")
    now = require_non_negative(now_ms, "nowMs")
    task_id = utf8(task_id, "taskId")
    damaged: str | None = None
    task: AsyncTask | None
    try:
        task = yield from on(index, operations.get(shard, task_id), writes=False)
    except DamagedRecordError as error:
        task, damaged = None, error.message
    home = ns.map.key_index(key)
    home_shard = ns.shards[home]

    def decide() -> Plan[Any]:
        yield from operations.before_write(home_shard)
        return (yield from claims.deliver_known(home_shard, key, task, damaged, number_text(now)))

    reply = yield from on(home, decide())
    return operations.delivery_of(task_id, reply)


def resume(
    ns: Namespace, task_id: str, cursor_version: int, full_task: bool
) -> MergedPlan[ResumeResult]:
    """What changed after ``cursor_version``, from the task's shard."""
    index = ns.index_of(task_id)
    return (
        yield from on(
            index,
            operations.resume(ns.shards[index], task_id, cursor_version, full_task),
            writes=False,
        )
    )


# -- groups -------------------------------------------------------------------------


def seal_group(ns: Namespace, group_id: str, total: int) -> MergedPlan[GroupSummary]:
    """The total declared in the group's home shard; in a namespace of several shards,
    then the group check and the summary of every shard's counters."""
    if ns.count > 1:
        yield FIX_COUNT
    group = utf8(require_text(group_id, "groupId"), "groupId")
    size = require_integer(total, "total", 1)
    home = ns.index_of(group)
    summary = yield from on(home, _seal(ns.shards[home], group, size))
    if ns.count == 1:
        return summary
    yield from groups.check(ns, group, None)
    counters = yield from groups.counters(ns, group)
    merged = groups.summary_of(group, counters[home], counters)
    assert merged is not None  # the home shard holds the sealed group
    return merged


def _seal(shard: Any, group: str, size: int) -> Plan[GroupSummary]:
    k = shard.keys
    now = yield from server_time()
    flat = yield ScriptCall(
        "seal_group",
        [k.group(group), k.group_members(group), k.group_outbox],
        SealGroupArgs(dumps(group, "groupId"), size, now, shard.retention_ms).argv(),
    )
    return group_summary_of(group, flat)
