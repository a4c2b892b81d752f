"""A Redis book's concurrency slots (extension; ``asyncbook._slots`` has the rules): one
script call on the namespace's hash tag (lua/slots.lua), which also reads its running
tasks' stall times; a limited start's take rides in its claim's call (claim_run.lua),
as the task's keys and the slot's share that tag.

A sharded namespace is refused (``invalid-request`` naming ``limit``): a task's stall
time lies on its own shard's tag, and a script touches one Cluster slot, so a key's
running set could not see the heartbeats of tasks on other shards. One namespace's
shard (a Cluster included) keeps them all in one slot.
"""

from __future__ import annotations

from .._slots import Slot, SlotRequest, SlotStart, slot_args, slot_request
from ..errors import invalid
from ._merged import MergedPlan, on
from ._namespace import Namespace
from ._operations import before_write
from ._plan import SETTLE, Plan, ScriptCall
from ._replies import text_of
from ._script_args import SlotArgs
from ._task_ops import claim_in_slot

__all__ = ["claim_run_in_slot", "release_slot", "take_slot"]


def claim_run_in_slot(
    ns: Namespace,
    task_id: str,
    worker: str,
    slot: SlotRequest,
    *,
    at_ms: int | float | None = None,
    callback_id: str | None = None,
) -> MergedPlan[SlotStart]:
    """A limited start: ``claim_run`` whose start, about to be granted, takes the slot
    first, in the same script call (``SlotBook.claim_run_in_slot``)."""
    request = slot_request(slot)
    _one_shard(ns)
    found = yield from claim_in_slot(ns, task_id, worker, at_ms, callback_id, request)
    return found if isinstance(found, SlotStart) else SlotStart(found, None)


def take_slot(
    ns: Namespace, key: str, task_id: str, limit: int, *, lease_ms: int, payload: str = ""
) -> MergedPlan[Slot]:
    """Take a slot of ``key`` for ``task_id``, or wait in its line (``SlotBook.take_slot``);
    one script call."""
    args = SlotArgs("take", *slot_args(key, task_id, limit, lease_ms, payload)[1:])
    return (yield from _call(ns, args.task_id, key, args))


def release_slot(
    ns: Namespace, key: str, task_id: str, limit: int, *, lease_ms: int
) -> MergedPlan[Slot]:
    """Free ``task_id``'s slot of ``key`` and give free slots to its line
    (``SlotBook.release_slot``); one script call."""
    args = SlotArgs("release", *slot_args(key, task_id, limit, lease_ms)[1:4], "")
    return (yield from _call(ns, args.task_id, key, args))


def _one_shard(ns: Namespace) -> None:
    if ns.count > 1:
        raise invalid(
            f"limit: concurrency limits need a namespace of one shard (this one has {ns.count})",
            field="limit",
        )


def _call(ns: Namespace, task_id: str, key: str, args: SlotArgs) -> MergedPlan[Slot]:
    _one_shard(ns)
    return (yield from on(0, _slots(ns, key, args)))


def _slots(ns: Namespace, key: str, args: SlotArgs) -> Plan[Slot]:
    shard = ns.first
    yield SETTLE
    yield from before_write(shard)
    keys = shard.keys
    names = [keys.stalls, keys.slot_running(key), keys.slot_line(key), keys.slot_payloads(key)]
    reply = yield ScriptCall("slots", names, args.argv())
    released = tuple(text_of(part) for part in reply[2:])
    return Slot(text_of(reply[0]) == "1", released, int(reply[1]))
