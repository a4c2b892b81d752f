"""The audit trail in Redis, as plans: a cancel's entry (written by its own script call,
cancel.lua), an entry for a change another call made (audit.lua), and the reads.

A task's entries are a list beside its record (kept as long as the record, its latest
``TASK_AUDIT_ENTRIES``); every entry also goes to the namespace's log, a stream capped
near ``Shard.audit_entries`` entries whose ids are the server's clock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._audit import (
    MAX_AUDIT_PAGE,
    TASK_AUDIT_ENTRIES,
    AuditEntry,
    require_action,
    require_actor,
    require_audit_reason,
)
from .._checks import require_limit, require_non_negative, require_string
from ..errors import UnknownTaskError
from ._args import utf8
from ._plan import Plan, ScriptCall, command
from ._replies import text_of
from ._script_args import AuditArgs, RecordAuditArgs
from ._scripts import ScriptStatus
from ._shard import Shard

__all__ = ["audit_args", "cancel_entry", "read", "record"]


def audit_args(shard: Shard, actor: Any, action: str, reason: str | None) -> AuditArgs:
    """An entry's script slots, ``actor`` checked (``reason`` None: not said)."""
    return AuditArgs(
        actor=utf8(require_actor(actor), "actor"),
        action=action,
        reason_given=reason is not None,
        reason="" if reason is None else reason,
        log_cap=shard.audit_entries,
        task_cap=TASK_AUDIT_ENTRIES,
    )


def cancel_entry(
    shard: Shard, actor: str | None, reason: str | None
) -> Callable[[bool], AuditArgs] | None:
    """A cancel's audit entry for ``_task_ops.cancel`` (cancel.lua writes it in the cancel's
    call), by whether the cancel's shape was valid: the reason is kept unless the script
    refused it ('!shape', nothing written); None without ``actor`` (checked here)."""
    if actor is None:
        return None
    checked = require_actor(actor)

    def entry(shape_ok: bool) -> AuditArgs:
        kept = reason if shape_ok and isinstance(reason, str) else None
        return audit_args(shard, checked, "cancel", kept)

    return entry


def record(
    shard: Shard,
    task_id: str,
    action: str,
    actor: str,
    reason: str | None,
    outcome: str,
) -> Plan[None]:
    """Write one entry for a change of an existing task made by another call (a resend);
    ``UnknownTaskError`` when there is no such task (nothing written)."""
    task_id = utf8(require_string(task_id, "taskId"), "taskId")
    audit = audit_args(shard, actor, require_action(action), require_audit_reason(reason))
    outcome = utf8(require_string(outcome, "outcome"), "outcome")
    keys = [shard.keys.task(task_id), shard.keys.task_audit(task_id), shard.keys.audit_log]
    reply = yield ScriptCall("audit", keys, RecordAuditArgs(task_id, audit, outcome).argv())
    if text_of(reply[0]) == ScriptStatus.UNKNOWN:
        raise UnknownTaskError(task_id)


def read(
    shard: Shard, task_id: str | None, since_ms: int | float | None, limit: int
) -> Plan[list[AuditEntry]]:
    """Entries newest first: a task's (its list), or the namespace's (the log), at or
    after ``since_ms`` when given, at most ``limit`` (1 to ``MAX_AUDIT_PAGE``)."""
    count = require_limit(limit, maximum=MAX_AUDIT_PAGE)
    since = None if since_ms is None else int(require_non_negative(since_ms, "sinceMs"))
    if task_id is not None:
        task_id = utf8(require_string(task_id, "taskId"), "taskId")
        raw = yield command("lrange", shard.keys.task_audit(task_id), 0, -1)
        entries = [AuditEntry.model_validate_json(item) for item in reversed(raw)]
        return [e for e in entries if since is None or e.at_ms >= since][:count]
    low = "-" if since is None else str(since)
    rows = yield command("xrevrange", shard.keys.audit_log, "+", low, count=count)
    return [_logged(entry_id, fields) for entry_id, fields in rows]


def _logged(entry_id: Any, fields: dict[Any, Any]) -> AuditEntry:
    """A log entry: its JSON (field ``e``, without ``atMs``) and its id's time."""
    at_ms = text_of(entry_id).split("-", 1)[0]
    body = text_of(fields.get(b"e", fields.get("e", b"{}")))
    return AuditEntry.model_validate_json('{"atMs":' + at_ms + "," + body[1:])
