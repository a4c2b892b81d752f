"""A book's calls about tasks, as namespace plans (``_merged``).

A call about one task runs in its shard, one script call as the shard's plan makes it
(``_operations``, ``_audit``). A callback id or idempotency key that lives in another
shard is claimed there first (``_claims``); a member's end in a namespace of several
shards is followed by its group's check (``_groups``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._book import CreateSpec, EventInput, cancel_input
from .._checks import require_integer, require_non_negative, require_text
from .._jsrules import is_blank
from .._machine import stall_event
from .._models import (
    AsyncTask,
    AsyncTransition,
    CallbackResult,
    DeliveryResult,
    GroupSummary,
    ResumeResult,
)
from .._one_run import SUPPRESS, Held, require_worker, start_input
from .._slots import SlotRequest, SlotStart
from ..errors import AsyncBookError, DamagedRecordError
from . import _audit as audits
from . import _claims as claims
from . import _groups as groups
from . import _operations as operations
from ._args import dumps, number_text, utf8
from ._merged import MergedPlan, NamespaceCall, OneShard, Sleep, asked, on, writing
from ._namespace import Namespace
from ._plan import ScriptCall, command, server_time
from ._replies import callback_result, text_of
from ._script_args import SealGroupArgs
from ._scripts import ScriptStatus

__all__ = [
    "RELEASED_ON",
    "Outcome",
    "apply",
    "cancel",
    "claim",
    "claim_in_slot",
    "claim_run",
    "create",
    "deliver_result",
    "expire",
    "record_audit",
    "release",
    "resume",
    "seal_group",
]

Outcome = CallbackResult | AsyncBookError

RELEASED_ON = ("invalid-request", "damaged", "conflict")
"""The codes of an apply that surely wrote nothing: its claim is released."""

_TAKEN_CHECKS = 20
"""How often a claim held by another task without its marker is read again (every
``_TAKEN_PAUSE`` s) before the id is taken as that task's."""
_TAKEN_PAUSE = 0.01


def create(ns: Namespace, spec: CreateSpec) -> MergedPlan[AsyncTask]:
    """create.lua in the task's shard."""
    index = yield from writing(ns, spec.id)
    return (yield from on(index, operations.create(ns.shards[index], spec)))


# -- claims -------------------------------------------------------------------------


def claim(ns: Namespace, task_id: str, identifier: str) -> MergedPlan[claims.Claim]:
    """Claim a callback id for ``task_id`` in its home shard (``_claims``)."""
    home = ns.map.home_index(identifier)
    for _ in range(_TAKEN_CHECKS):
        found, holder = yield from on(home, claims.claim(ns.shards[home], identifier, task_id))
        if found != claims.Claim.TAKEN or holder == "":
            return found
        holder_index = ns.index_of(holder)  # has its apply committed (the id's marker)?
        marker = ns.shards[holder_index].keys.callback(identifier)
        if (yield from on(holder_index, asked(command("exists", marker)), writes=False)):
            return found
        yield Sleep(_TAKEN_PAUSE)
    return claims.Claim.TAKEN


def release(ns: Namespace, task_id: str, identifier: str) -> MergedPlan[None]:
    home = ns.map.home_index(identifier)
    yield from on(home, claims.release(ns.shards[home], identifier, task_id))


def _claimed(
    ns: Namespace, task_id: str, identifier: str | None, call: Callable[[bool], MergedPlan[Any]]
) -> MergedPlan[Any]:
    """``call(taken)``, with ``identifier`` claimed for ``task_id`` first when it lives in
    another shard; a claim made here is released when the call surely wrote nothing."""
    if not ns.crosses(task_id, identifier):
        return (yield from call(False))
    assert identifier is not None
    found = yield from claim(ns, task_id, identifier)
    if found == claims.Claim.TAKEN:
        return (yield from call(True))
    try:
        return (yield from call(False))
    except AsyncBookError as error:
        if found == claims.Claim.NEW and error.code in RELEASED_ON:
            yield from release(ns, task_id, identifier)
        raise


# -- events -------------------------------------------------------------------------


def apply(
    ns: Namespace, task_id: str, event: EventInput, callback_id: str | None = None
) -> NamespaceCall[CallbackResult]:
    """Apply one event; a callback id already recorded changes nothing."""
    if ns.count == 1:  # one script call, the claim and the group's end in it
        return OneShard(0, operations.apply(ns.first, task_id, event, callback_id))
    return _apply_across(ns, task_id, event, callback_id)


def _apply_across(
    ns: Namespace, task_id: str, event: EventInput | None, callback_id: str | None
) -> MergedPlan[CallbackResult]:
    """``apply`` in a namespace of several shards (``expire``, None, in any): the callback
    id claimed first (``_claimed``), the group checked after a member's end."""
    index = yield from writing(ns, task_id)
    shard = ns.shards[index]

    def run(taken: bool) -> MergedPlan[CallbackResult]:
        return on(index, operations.apply(shard, task_id, event, callback_id, taken=taken))

    result: CallbackResult = yield from _claimed(ns, task_id, callback_id, run)
    yield from groups.after_ends(ns, index, [result], [task_id], [event])
    return result


def cancel(
    ns: Namespace,
    task_id: str,
    reason: str | None = None,
    *,
    at_ms: int | float | None = None,
    callback_id: str | None = None,
    actor: str | None = None,
) -> MergedPlan[CallbackResult]:
    """Cancel a queued or running task (extension): ``apply`` of a ``cancel`` event.

    ``at_ms`` defaults to the Redis server's clock. With ``actor`` the cancel and its
    audit entry are one script call (``_audit``).
    """
    index = yield from writing(ns, task_id)
    shard = ns.shards[index]
    event: dict[str, Any] = {}

    def run(taken: bool) -> MergedPlan[CallbackResult]:
        audit = None if taken else audits.cancel_entry(shard, actor, reason)
        at = (yield from on(index, server_time())) if at_ms is None else at_ms
        event.update(cancel_input(at, reason))
        plan = operations.apply(shard, task_id, event, callback_id, taken=taken, audit=audit)
        answer: CallbackResult = yield from on(index, plan)
        if taken and actor is not None:
            yield from on(
                index, audits.record(shard, task_id, "cancel", actor, reason, answer.reason)
            )
        return answer

    result: CallbackResult = yield from _claimed(ns, task_id, callback_id, run)
    # At the cancel's time, the server's when none was given (a late cancel expires the
    # task: not at the deadline).
    yield from groups.after_ends(ns, index, [result], [task_id], [event])
    return result


_STALE_TRIES = 3
"""How often ``claim_run`` ends an overdue holder and claims again (another worker may
take the run meanwhile; then it is held)."""


def claim_run(
    ns: Namespace,
    task_id: str,
    worker: str,
    *,
    at_ms: int | float | None = None,
    callback_id: str | None = None,
) -> MergedPlan[CallbackResult | Held]:
    """Start the task unless a live attempt holds it (one run per task, extension).

    ``Held`` when the task is running and its heartbeat is not overdue: nothing changed
    but the postponement's note, and the refused delivery's audit entry (``suppress``,
    outcome ``held``) is written in the
    same call. A running attempt whose heartbeat is overdue is first ended as
    ``end_stalled`` would end it; otherwise this is ``apply`` of ``{type: start, atMs,
    worker}`` (``at_ms`` defaults to the server's clock). One round trip.
    """
    found = yield from claim_in_slot(ns, task_id, worker, at_ms, callback_id, None)
    assert not isinstance(found, SlotStart)
    return found


def claim_in_slot(
    ns: Namespace,
    task_id: str,
    worker: str,
    at_ms: int | float | None,
    callback_id: str | None,
    slot: SlotRequest | None,
) -> MergedPlan[CallbackResult | Held | SlotStart]:
    """``claim_run``; with ``slot`` (a namespace of one shard), a start about to be
    granted takes it first, in the same call (``SlotStart``)."""
    who = require_worker(worker)
    index = yield from writing(ns, task_id)
    shard = ns.shards[index]
    entry = audits.audit_args(shard, who, SUPPRESS, "")

    def run(taken: bool) -> MergedPlan[CallbackResult | Held | SlotStart]:
        at = (yield from on(index, server_time())) if at_ms is None else at_ms
        event = start_input(at, who)
        if taken:  # another task's id: a duplicate-callback, whoever holds the run
            return (
                yield from on(
                    index, operations.apply(shard, task_id, event, callback_id, taken=True)
                )
            )
        last = None
        for _ in range(_STALE_TRIES):
            found = yield from on(
                index, operations.claim_run(shard, task_id, event, callback_id, entry, slot)
            )
            if not isinstance(found, operations.Stale):
                return found
            last = found
            stall = stall_event(found.now, found.timeout_ms, True)  # this is its redelivery
            callback = f"stalled:{task_id}:{found.stall_at}"
            keys, args, _ = shard.apply_call(task_id, stall, callback, only_if_stalled=True)
            reply = yield from on(index, operations.apply_one(shard, keys, args))
            if text_of(reply[0]) != ScriptStatus.FRESH:
                ended = callback_result(task_id, reply, None)
                yield from groups.after_ends(ns, index, [ended], [task_id])
        # Overdue holders kept coming back (other workers' claims took the run and
        # stalled): held, postponed to after the last one's timeout.
        assert last is not None
        return Held(0, last.now + last.timeout_ms, last.now, True)

    result: CallbackResult | Held | SlotStart = yield from _claimed(ns, task_id, callback_id, run)
    return result


def expire(ns: Namespace, task_id: str) -> MergedPlan[AsyncTransition]:
    """Expire the task at its deadline, as the sweep does (notified at the deadline)."""
    return (yield from _apply_across(ns, task_id, None, None)).transition()


def record_audit(
    ns: Namespace, task_id: str, action: str, actor: str, reason: str | None, outcome: str
) -> MergedPlan[None]:
    """Record a change another call made to an existing task (a resend of your own;
    ``Resender`` records its resends itself): one entry."""
    index = yield from writing(ns, task_id)
    yield from on(index, audits.record(ns.shards[index], task_id, action, actor, reason, outcome))


# -- delivering ---------------------------------------------------------------------


def deliver_result(
    ns: Namespace, task_id: str, idempotency_key: str, now_ms: int | float
) -> MergedPlan[DeliveryResult]:
    """Hand the result over once per idempotency key."""
    index = yield from writing(ns, task_id)
    shard = ns.shards[index]
    if not ns.crosses(task_id, idempotency_key, key=True) or is_blank(idempotency_key):
        plan = operations.deliver_result(shard, task_id, idempotency_key, now_ms)
        return (yield from on(index, plan))
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
    plan = claims.deliver_known(ns.shards[home], task_id, key, task, damaged, number_text(now))
    return (yield from on(home, plan))


def resume(
    ns: Namespace, task_id: str, cursor_version: int, *, full_task: bool = True
) -> OneShard[ResumeResult]:
    """What changed after ``cursor_version``: caught-up, a delta, or a snapshot.

    With ``full_task=False`` a caught-up or delta answer carries the task without its
    history, so it costs O(events returned) however long the history is.
    """
    index = ns.index_of(task_id)
    return OneShard(index, operations.resume(ns.shards[index], task_id, cursor_version, full_task))


# -- groups -------------------------------------------------------------------------


def seal_group(ns: Namespace, group_id: str, total: int) -> MergedPlan[GroupSummary]:
    """Declare that ``group_id`` has ``total`` members: once they have all ended, one
    group notification (at once if they already have)."""
    yield from writing(ns)
    group = utf8(require_text(group_id, "groupId"), "groupId")
    size = require_integer(total, "total", 1)
    home = ns.index_of(group)
    shard = ns.shards[home]
    now = yield from on(home, server_time())
    argv = SealGroupArgs(dumps(group, "groupId"), size, now, shard.retention_ms, ns.count > 1)
    keys = [shard.keys.group(group), shard.keys.group_members(group), shard.keys.group_outbox]
    flat = yield from on(home, asked(ScriptCall("seal_group", keys, argv.argv())))
    if ns.count > 1:
        yield from groups.check(ns, group)
        found = yield from groups.counters(ns, group)
    else:  # the one shard's counters, as seal_group.lua answered them
        pairs = zip(map(text_of, flat[::2]), map(text_of, flat[1::2]), strict=True)
        found = [{name: value for name, value in pairs if name in groups.GROUP_FIELDS}]
    merged = groups.summary_of(group, found[home], found)
    assert merged is not None  # the home shard holds the sealed group
    return merged
