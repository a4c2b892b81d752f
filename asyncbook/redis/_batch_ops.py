"""A book's calls on many tasks at once, written once as namespace plans (``_merged``):
each shard's part in one round trip (a pipeline or a MULTI/EXEC, ``_batches``), the
shards at once; callback ids of another shard claimed first (``_task_ops``), and the
groups of the members that ended checked after (``_groups``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .._book import ApplyItem, CreateSpec, EventInput
from .._checks import require_non_negative, require_string
from .._models import GROUP_END_STATES, AsyncTask, AsyncTransition, CallbackResult
from ..errors import AsyncBookError, invalid
from . import _batches as batches
from . import _cancels as cancels
from . import _claims as claims
from . import _expiries as expiries
from . import _groups as groups
from . import _operations as operations
from . import _task_ops as tasks
from ._args import utf8
from ._merged import MergedPlan, OnShards, every, on, spread, writing
from ._namespace import Namespace
from ._plan import Plan, ScriptCall, server_time
from ._script_args import TaskIdsArgs
from ._scripts import BookScript, ScriptedEvents
from ._task_ops import Outcome

__all__ = [
    "apply_in_script",
    "apply_many",
    "apply_many_then",
    "cancel_many",
    "create_many",
    "end_stalled",
    "expire_many",
    "heartbeat",
]


def create_many(
    ns: Namespace, specs: Iterable[CreateSpec]
) -> MergedPlan[list[AsyncTask | AsyncBookError]]:
    """``create`` for each spec, in one pipelined round trip (each atomic on its own);
    a spec the book refuses answers its error in its place."""
    yield from writing(ns)
    given = list(specs)
    parts = ns.by_shard([spec.id for spec in given])
    return (
        yield from spread(
            ns.shards,
            parts,
            lambda shard, ats: batches.create_many(shard, [given[at] for at in ats]),
            len(given),
        )
    )


def apply_many(
    ns: Namespace, items: Iterable[ApplyItem], *, full_task: bool = True
) -> MergedPlan[list[CallbackResult | AsyncBookError]]:
    """Apply many events in one pipelined round trip, each atomic on its own.

    With ``full_task=False`` each result's task comes without its history (cheaper,
    for callers that only need the reasons, such as the sweep).
    """
    yield from writing(ns)
    given: list[ApplyItem] = list(items)
    out: list[Outcome | None] = [None] * len(given)
    waiting: dict[int, list[int]] = {}
    holders: dict[str, set[int]] = {}  # a waiting event's callback id: the shards holding it
    claimed: dict[int, claims.Claim] = {}
    ends: list[groups.End] = []

    def batch(shard: Any, ats: list[int]) -> Plan[list[Outcome]]:
        results, _reply = yield from batches.apply_many_then(
            shard, [given[at] for at in ats], full_task, None
        )
        return results

    def apply_parts(parts: dict[int, list[int]]) -> MergedPlan[None]:
        """The events at ``parts``' positions, each shard's in one MULTI/EXEC (the shards
        at once): their answers go in ``out``, the members they ended in ``ends`` (checked
        at the end: ``groups.after_batch``), and the claims of those that surely wrote
        nothing are released."""
        answers = yield from spread(ns.shards, parts, batch, len(given))
        for index, ats in parts.items():
            results = [answers[at] for at in ats]
            ids, events = [given[at][0] for at in ats], [given[at][1] for at in ats]
            ends.extend(groups.ends_of(ns.shards[index], results, ids, events, ats))
            for at, result in zip(ats, results, strict=True):
                out[at] = result
                if (
                    isinstance(result, AsyncBookError)
                    and claimed.get(at) == claims.Claim.NEW
                    and result.code in tasks.RELEASED_ON
                ):
                    task_id, _event, callback = given[at]
                    assert callback is not None
                    yield from tasks.release(ns, task_id, callback)

    def send(shards: Iterable[int]) -> MergedPlan[None]:
        """The waiting parts of ``shards`` applied, no longer waiting."""
        part = {shard: waiting.pop(shard) for shard in sorted(shards)}
        for shard, ats in part.items():
            for earlier in ats:
                held_id = given[earlier][2]
                if held_id is not None and held_id in holders:
                    holders[held_id].discard(shard)
        yield from apply_parts(part)

    for at, (task_id, event, callback) in enumerate(given):
        index = ns.index_of(task_id)
        crosses = ns.crosses(task_id, callback)
        if callback is not None:
            # An earlier event with the same id, still waiting for its shard's part,
            # decides whether this one finds the id taken (its marker, or its claim that
            # an apply that fails releases): its part runs first. Not needed when both
            # are in this task's shard, its home: one transaction keeps their order.
            before = set(holders.get(callback, ()))
            if not crosses:
                before.discard(index)
            if before:
                yield from send(before)
        if crosses:
            assert callback is not None
            found = yield from tasks.claim(ns, task_id, callback)
            if found == claims.Claim.TAKEN:
                # The shard's earlier events first, in order: this one follows them.
                if index in waiting:
                    yield from send([index])
                plan = operations.apply(
                    ns.shards[index], task_id, event, callback, full_task=full_task, taken=True
                )
                try:
                    out[at] = yield from on(index, plan)
                except AsyncBookError as error:
                    out[at] = error
                continue
            claimed[at] = found
        waiting.setdefault(index, []).append(at)
        if callback is not None:
            holders.setdefault(callback, set()).add(index)
    yield from apply_parts(waiting)
    yield from groups.after_batch(ns, ends)
    return [result for result in out if result is not None]


def apply_many_then(
    ns: Namespace,
    items: Iterable[ApplyItem],
    script: BookScript,
    keys: Sequence[str],
    args: Sequence[Any],
    *,
    full_task: bool = True,
) -> MergedPlan[tuple[list[CallbackResult | AsyncBookError], Any]]:
    """``apply_many`` and then one more script, all in one MULTI/EXEC: one round trip,
    nothing runs between them, and the script sees what the events changed.

    After Redis lost the scripts (SCRIPT FLUSH, a restart) the call is sent again
    with them: give the items callback ids, and make the script safe to run twice.

    ``script`` (a ``BookScript``, for instance from ``extra_script``) must touch only
    keys on the book's Redis (on a Cluster: in the book's slot). Returns the events'
    results and the script's reply; an error the script raised is raised.
    """
    yield from writing(ns)
    given = list(items)
    indexes = {ns.index_of(item[0]) for item in given}
    if len(indexes) > 1:
        raise invalid(
            "the items' tasks live in several shards: one transaction cannot span them",
            field="items",
        )
    index = indexes.pop() if indexes else 0
    call = ScriptCall(script.name, keys, args, script=script)
    plan = batches.apply_many_then(ns.shards[index], list(given), full_task, call)
    results, reply = yield from on(index, plan)
    yield from groups.after_ends(ns, index, results, [item[0] for item in given])
    if isinstance(reply, Exception):
        raise reply
    return results, reply


def apply_in_script(
    ns: Namespace,
    task_id: str,
    items: Sequence[tuple[EventInput | None, str | None]],
    script: BookScript,
    key: str,
    args: Sequence[str],
    *,
    name: str | None = None,
    group_id: str | None = None,
) -> MergedPlan[ScriptedEvents]:
    """Events of one task and the caller's own Lua around them, in one script call.

    ``script`` (from ``events_script``) gets KEYS: the task's hash, its history,
    ``key``, apply.lua's KEYS 4..9, then one callback marker per event; ARGV:
    ``args``, the number of events, then apply.lua's ARGV per event (ApplyArgs). It
    applies them with ``apply_events(KEYS, ARGV, len(args) + 1)`` (_apply.lua) and
    answers ``{'!unknown'}`` (raised as ``UnknownTaskError``) or
    ``{status, state, answers}``, ``answers`` being what ``apply_events`` returned.
    An event None expires the task at its deadline (as ``expire``).

    ``key`` must be on the book's Redis; on a Cluster, in the book's slot. ``name``
    and ``group_id``, the task's name and group where the caller knows them (a
    worker does), save a round trip when this book has not seen the task before.
    """
    index = yield from writing(ns, task_id)
    shard = ns.shards[index]
    plan = batches.apply_in_script(shard, task_id, items, (script, key, args), name, group_id)
    answer = yield from on(index, plan)
    # Then the group's check when the events ended a member (callback ids are the
    # shard's markers).
    ended = any(not isinstance(each, AsyncBookError) and each.changed for each in answer.outcomes)
    if ns.count > 1 and ended and answer.state in GROUP_END_STATES:
        group = groups.group_of(shard, task_id)
        if group is not None:
            yield from groups.check(ns, group)
    return answer


def expire_many(
    ns: Namespace, task_ids: Iterable[str], *, full_task: bool = True
) -> MergedPlan[list[AsyncTransition | AsyncBookError]]:
    """Expire many tasks at their deadlines: one script call per thousand (each
    expiry is ``expire``'s, atomic on its own)."""
    out = yield from _each_shard(
        ns, task_ids, lambda shard, ids: expiries.expire_many(shard, ids, full_task)
    )
    return [r if isinstance(r, AsyncBookError) else r.transition() for r in out]


def cancel_many(
    ns: Namespace,
    task_ids: Iterable[str],
    *,
    actor: str,
    reason: str | None = None,
    at_ms: int | float | None = None,
) -> MergedPlan[list[CallbackResult | AsyncBookError]]:
    """Cancel many tasks, each audited as ``actor``'s (extension): for each id what
    ``cancel(task_id, reason, at_ms=at_ms, actor=actor)`` answers, its error in its
    place, with the same writes, notification and audit entry. One script call per
    shard per thousand ids (each cancel atomic on its own); ``at_ms`` defaults to each
    shard's clock, read once."""
    # A group ends at its member's cancel's time (a late cancel expires the task: not at
    # the deadline), each shard's clock when none was given.
    times: dict[str, int | float] = {}
    return (
        yield from _each_shard(
            ns,
            task_ids,
            lambda shard, ids: cancels.cancel_many(shard, ids, actor, reason, at_ms, times),
            lambda task_id: {"atMs": times.get(task_id)},
        )
    )


def _each_shard(
    ns: Namespace,
    task_ids: Iterable[str],
    make: Callable[[Any, list[str]], Plan[list[Any]]],
    event_of: Callable[[Any], Any] = lambda _task_id: None,
) -> MergedPlan[list[Any]]:
    """``make(shard, its ids)`` on each shard holding some of ``task_ids``, the shards at
    once; the answers in the ids' order, the groups of the members they ended checked
    after (each task ended by ``event_of(its id)``: its ``atMs``, None at the task's own
    time)."""
    yield from writing(ns)
    ids = list(task_ids)
    parts = ns.by_shard(ids)
    out: list[Any] = yield from spread(
        ns.shards, parts, lambda shard, ats: make(shard, [ids[at] for at in ats]), len(ids)
    )
    ends: list[groups.End] = []
    for index, ats in parts.items():
        results, its_ids = [out[at] for at in ats], [ids[at] for at in ats]
        events = [event_of(task_id) for task_id in its_ids]
        ends += groups.ends_of(ns.shards[index], results, its_ids, events, ats)
    yield from groups.after_batch(ns, ends)
    return out


def end_stalled(
    ns: Namespace, now_ms: int | float | None = None, limit: int = 1000
) -> MergedPlan[list[CallbackResult | AsyncBookError]]:
    """Fail every running task whose heartbeat is overdue (by the server's clock).

    The script checks again, atomically, that the task is still overdue, so a
    heartbeat that arrives meanwhile wins; each fail carries a callback id naming the
    stall, so two sweeps fail a task once.
    """
    now: int | float
    if now_ms is None:
        now = yield from on(0, server_time(), writes=False)
    else:
        now = require_non_negative(now_ms, "nowMs")
    found = yield every(
        ns.shards, lambda shard: batches.end_stalled(shard, now, limit), writes=True
    )
    out: list[Outcome] = []
    for index, results in enumerate(found):
        ids = ["" if isinstance(r, AsyncBookError) else r.task.id for r in results]
        yield from groups.after_ends(ns, index, results, ids)
        out += results
    return out


def heartbeat(ns: Namespace, task_ids: Iterable[str]) -> MergedPlan[int]:
    """Say that these tasks' running attempts are alive: one round trip for them all."""
    ids = list(task_ids)
    parts = ns.by_shard(ids)
    indexes = tuple(parts)
    plans = tuple(_heartbeat(ns.shards[i], [ids[at] for at in parts[i]]) for i in indexes)
    if not plans:
        return 0
    return sum((yield OnShards(plans, indexes, True)))


def _heartbeat(shard: Any, task_ids: list[Any]) -> Plan[int]:
    ids = [utf8(require_string(task_id, "taskId"), "taskId") for task_id in task_ids]
    keys = [shard.keys.stalls, shard.keys.workers, *map(shard.keys.task, ids)]
    return int((yield ScriptCall("heartbeat", keys, TaskIdsArgs(tuple(ids)).argv())))
