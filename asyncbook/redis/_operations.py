"""The books' operations as one shard's plans (``_plan``): each checks its input, builds
the script call from the ``Shard`` (its key schema and retention) and reads the reply.
A plan without a docstring is its namespace plan's (``_reads``, ``_task_ops``) in one shard.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, NamedTuple

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .._book import CreateSpec, EventInput
from .._checks import (
    require_integer,
    require_limit,
    require_non_negative,
    require_string,
    require_text,
)
from .._models import (
    AsyncTask,
    CallbackResult,
    DeliveryReceipt,
    DeliveryResult,
    HistoryEntry,
    ResumeResult,
)
from .._one_run import Held
from .._reasons import Reason
from .._slots import Slot, SlotRequest, SlotStart
from ..errors import AsyncBookError, DamagedRecordError, UnknownTaskError
from ._args import dumps, number_text, utf8
from ._creating import create_args, created_on
from ._plan import SETTLE, Pipeline, Plan, ScriptCall, command, server_command
from ._replies import callback_result, status_of, text_of
from ._script_args import ApplyArgs, AuditArgs, CancelArgs, DeliverArgs, ResumeArgs, SlotArgs
from ._scripts import ScriptStatus
from ._server import PROBE_SCRIPT, require_supported, server_info
from ._shard import Shard

__all__ = [
    "apply",
    "apply_one",
    "before_write",
    "Stale",
    "check_server",
    "claim_run",
    "claim_sweep",
    "deliver_result",
    "delivery_of",
    "get",
    "last_cursor",
    "last_sweep_ms",
    "overdue",
    "record_sweep",
    "resume",
]

log = logging.getLogger(__name__)


def check_server(shard: Shard) -> Plan[str | None]:
    """One shard's ``RedisBook.check_server`` (one round trip): its ``maxmemory-policy``."""
    checks = [
        server_command("info", "server"),
        server_command("info", "memory"),
        server_command("eval", PROBE_SCRIPT, 0),
    ]
    try:
        server, memory, probe = yield Pipeline(checks, errors_as_replies=True)
    except (RedisConnectionError, RedisTimeoutError):
        return None  # not checked: again on the next write
    require_supported(
        None if isinstance(server, ResponseError) else server_info(server),
        probe if isinstance(probe, ResponseError) else None,
    )
    shard.server_checked = True
    if isinstance(memory, ResponseError):
        return None  # INFO refused (an embedded server, a restricted user): not known
    policy = str(memory.get("maxmemory_policy", "noeviction"))
    if policy != "noeviction":
        log.warning(
            "asyncbook: Redis maxmemory-policy is %r: when memory is full Redis evicts "
            "keys, and the book loses tasks or parts of them. Set maxmemory-policy "
            "noeviction for the book's Redis (docs/faults.md).",
            policy,
        )
    return policy


def before_write(shard: Shard) -> Plan[None]:
    """What runs before a book's first write: the server check."""
    if not shard.server_checked:
        yield from check_server(shard)


def create(shard: Shard, spec: CreateSpec) -> Plan[AsyncTask]:
    """create.lua for one task, waited on by ``create`` (a publish that does not defer,
    the worker's create from the message). The create sender (``_sender``) pipelines the
    same call (``create_args``) and reads its answer later (``created_on``)."""
    task, keys, args = create_args(shard, spec)
    yield from before_write(shard)
    reply = yield ScriptCall("create", keys, args.argv())
    return created_on(shard, spec.id, task, reply, args)


def get(shard: Shard, id: str) -> Plan[AsyncTask | None]:
    yield SETTLE
    task_id = utf8(require_string(id, "id"), "id")
    reply = yield ScriptCall("get", [shard.keys.task(task_id), shard.keys.history(task_id)])
    if reply is None:
        return None
    if isinstance(reply, list):
        raise DamagedRecordError(task_id, text_of(reply[1]))
    return AsyncTask.model_validate_json(reply)


def apply(
    shard: Shard,
    task_id: str,
    event: EventInput | None,
    callback_id: str | None = None,
    *,
    full_task: bool = True,
    taken: bool = False,
    audit: Callable[[bool], AuditArgs] | None = None,
) -> Plan[CallbackResult]:
    """Apply one event (None: expire the task at its deadline, as the sweep does); a
    callback id already recorded changes nothing (nor one another task holds:
    ``taken``). ``full_task=False``: the task comes without its history.
    ``audit(shape_ok)``: a cancel's audit entry, written by the same script call
    (cancel.lua) whose answer is the same."""
    yield SETTLE
    keys, args, shape_error = shard.apply_call(task_id, event, callback_id, full_task, taken=taken)
    entry = None if audit is None else audit(shape_error is None)
    yield from before_write(shard)
    reply = yield from apply_one(shard, keys, args, entry)
    return callback_result(args.task_id, reply, shape_error)


class Stale(NamedTuple):
    """claim_run.lua's answer for a task whose running attempt is overdue."""

    stall_at: int
    now: int
    timeout_ms: int


def claim_run(
    shard: Shard,
    task_id: str,
    event: EventInput,
    callback_id: str | None,
    audit: AuditArgs,
    slot: SlotRequest | None = None,
) -> Plan[CallbackResult | Stale | Held | SlotStart]:
    """A start unless a live attempt holds the task (claim_run.lua): ``Held`` when one
    does (its audit entry written), ``Stale`` when the holder is overdue (nothing written).
    With ``slot``, a start about to be granted takes it first (``SlotStart``)."""
    yield SETTLE
    keys, args, shape_error = shard.apply_call(task_id, event, callback_id, only_if_stalled="u")
    yield from before_write(shard)
    extra: tuple[list[str], list[str]] = ([], [])
    if slot is not None:
        k = shard.keys
        names = [k.slot_running(slot.key), k.slot_line(slot.key), k.slot_payloads(slot.key)]
        extra = (names, SlotArgs("take", args.task_id, *slot[1:]).argv()[2:])
    reply = yield from apply_one(shard, keys, args, audit, "claim_run", extra)
    if text_of(reply[0]) == "!slot":  # a limited start's take, then the start's answer
        end = 2 + int(reply[1])
        released = tuple(map(text_of, reply[4:end]))
        taken = Slot(text_of(reply[2]) == "1", released, int(reply[3]))
        rest = reply[end:]  # none: it waits in the key's line
        result = _claimed(args.task_id, rest, shape_error) if rest else None
        assert not isinstance(result, Stale)  # a stale holder is answered before the slot
        return SlotStart(result, taken)
    return _claimed(args.task_id, reply, shape_error)


def _claimed(task_id: str, reply: Any, shape_error: Any) -> CallbackResult | Stale | Held:
    status = text_of(reply[0])
    if status == ScriptStatus.HELD:
        attempts, stall_at, now = (int(text_of(part)) for part in reply[1:4])
        return Held(attempts, stall_at, now, text_of(reply[4]) == "1")
    if status == ScriptStatus.STALE:
        return Stale(*(int(text_of(part)) for part in reply[1:4]))
    return callback_result(task_id, reply, shape_error)


def apply_one(
    shard: Shard,
    keys: list[str],
    args: ApplyArgs,
    audit: AuditArgs | None = None,
    script: str = "cancel",
    extra: tuple[list[str], list[str]] = ([], []),
) -> Plan[Any]:
    """apply.lua's reply to one call, sent with the task's info block (``_facts``); with
    ``audit``, ``script``'s (cancel.lua or claim_run.lua: the task's audit list and the
    log after its keys)."""
    name, argv, also = "apply", args.argv(), args.marker_hash
    if audit is not None:
        keys = [*keys, shard.keys.task_audit(args.task_id), shard.keys.audit_log]
        name, argv = script, CancelArgs(args, audit).argv()
    return (
        yield from shard.facts.run(
            args.task_id,
            lambda block, facts: ScriptCall(
                name, keys + block + also + extra[0], argv + facts + extra[1]
            ),
        )
    )


def resume(shard: Shard, task_id: str, cursor_version: int, full_task: bool) -> Plan[ResumeResult]:
    yield SETTLE
    task_id = utf8(require_string(task_id, "taskId"), "taskId")
    keys = [shard.keys.task(task_id), shard.keys.history(task_id)]
    try:
        cursor = require_integer(cursor_version, "cursorVersion")
    except AsyncBookError as error:
        if not (yield command("exists", keys[0])):
            raise UnknownTaskError(task_id) from None
        raise error
    argv = ResumeArgs(cursor, shard.retention_versions, full_task).argv()
    reply = yield ScriptCall("resume", keys, argv)
    mode = status_of(task_id, reply)
    task = AsyncTask.model_validate_json(reply[1])
    events = tuple(HistoryEntry.model_validate_json(raw) for raw in reply[2:])
    return ResumeResult(mode=mode, events=events, task=task)


def deliver_result(
    shard: Shard, task_id: str, idempotency_key: str, now_ms: int | float
) -> Plan[DeliveryResult]:
    key = utf8(require_text(idempotency_key, "idempotencyKey"), "idempotencyKey")
    now = require_non_negative(now_ms, "nowMs")
    task_id = utf8(require_string(task_id, "taskId"), "taskId")
    yield from before_write(shard)
    keys = [shard.keys.delivery(key), shard.keys.task(task_id), shard.keys.history(task_id)]
    argv = DeliverArgs(dumps(key, "idempotencyKey"), number_text(now), shard.retention_ms)
    reply = yield ScriptCall("deliver", keys, argv.argv())
    return delivery_of(task_id, reply)


def delivery_of(task_id: str, reply: Any) -> DeliveryResult:
    """deliver.lua's answer read (and a sharded namespace's ``_claims.deliver_known``)."""
    status = status_of(task_id, reply)
    if status == Reason.NOT_SUCCEEDED:
        return DeliveryResult(ok=False, duplicate=False, reason=Reason.NOT_SUCCEEDED)
    receipt = DeliveryReceipt.model_validate_json(reply[1])
    if status == Reason.DELIVERED:
        return DeliveryResult(ok=True, duplicate=False, reason=Reason.DELIVERED, receipt=receipt)
    mine = receipt.task_id == task_id
    reason = Reason.DUPLICATE_DELIVERY if mine else Reason.KEY_REUSED_FOR_OTHER_TASK
    return DeliveryResult(ok=mine, duplicate=True, reason=reason, receipt=receipt)


def overdue(shard: Shard, now_ms: int | float, limit: int, scores: bool = False) -> Plan[list[Any]]:
    """Ids of live tasks whose deadline is at or before ``now_ms``, earliest first
    (``scores``: their raw (id, deadline) rows)."""
    now = require_non_negative(now_ms, "nowMs")
    count = require_limit(limit, maximum=1_000_000)
    rows = yield command(
        "zrangebyscore", shard.keys.deadlines, "-inf", now, start=0, num=count, withscores=scores
    )
    return rows if scores else [text_of(task_id) for task_id in rows]


# The sweep's marks (``_surface.record_sweep``, ``last_sweep_ms``, ``claim_sweep``).


def record_sweep(shard: Shard, at_ms: int | float) -> Plan[None]:
    yield command("set", shard.keys.last_sweep, int(require_non_negative(at_ms, "atMs")))


def last_sweep_ms(shard: Shard) -> Plan[int | None]:
    value = yield command("get", shard.keys.last_sweep)
    return None if value is None else int(value)


def claim_sweep(shard: Shard, owner: str, lease_ms: int) -> Plan[bool]:
    key = shard.keys.sweep_lease
    previous = yield command("set", key, owner, nx=True, px=lease_ms, get=True)
    if previous is None:
        return True
    if text_of(previous) != owner:
        return False
    yield command("pexpire", key, lease_ms)
    return True


def last_cursor(shard: Shard, task_id: str) -> Plan[str | None]:
    yield SETTLE
    task_id = utf8(require_string(task_id, "taskId"), "taskId")
    exists, cursor = yield command("hmget", shard.keys.task(task_id), "id", "cur")
    if exists is None:
        raise UnknownTaskError(task_id)
    return text_of(cursor) or None if cursor is not None else None
