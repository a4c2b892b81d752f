"""The audit trail: who changed a task, when, how and why (``AuditEntry``), and the
checks every book applies to what a caller names as the actor, action and reason."""

from __future__ import annotations

import itertools
from collections import deque
from typing import Any, Protocol, runtime_checkable

from pydantic import Field, StrictStr

from ._checks import require_limit, require_non_negative
from ._models import Integer, WireModel
from .errors import invalid

__all__ = [
    "AUDIT_ACTIONS",
    "MAX_ACTOR",
    "MAX_AUDIT_PAGE",
    "MAX_AUDIT_REASON",
    "TASK_AUDIT_ENTRIES",
    "AuditEntry",
    "AuditLog",
    "AuditedBook",
    "require_action",
    "require_actor",
    "require_audit_reason",
]

AUDIT_ACTIONS = frozenset({"cancel", "resend", "retry", "suppress"})
"""The changes an audit entry may record. ``resend``: a task's kept message sent again as
a new task; ``retry`` is its old name, still accepted until 0.3.0 (entries
written with it read back as written); ``suppress``: a delivery not run because a live
attempt held the task (``claim_run``, one run per task)."""
MAX_ACTOR = 200
"""Longest actor name, in characters."""
MAX_AUDIT_REASON = 1000
"""Longest reason kept in an entry, in characters (a cancel's own limit)."""
TASK_AUDIT_ENTRIES = 100
MAX_AUDIT_PAGE = 1000
"""Most entries one read returns."""
"""How many entries each task keeps (its latest); the namespace's log keeps more."""


class AuditEntry(WireModel):
    """One recorded change: ``actor`` did ``action`` to ``task_id`` at ``at_ms`` (the
    book's clock) for ``reason``, and the book answered ``outcome`` (a reason such as
    ``cancelled`` or ``duplicate-cancel``; a resend's ``retried`` or its refusal's code),
    and for a resend ``retried_as``: the new task (left out of the JSON when None)."""

    at_ms: Integer
    actor: StrictStr
    action: StrictStr
    task_id: StrictStr
    reason: StrictStr | None = None
    outcome: StrictStr
    retried_as: StrictStr | None = Field(default=None, exclude_if=lambda value: value is None)


def require_actor(value: Any) -> str:
    """Who made a change: text of 1 to ``MAX_ACTOR`` characters, no control characters."""
    if not isinstance(value, str) or not value.strip():
        raise invalid("actor must be a non-blank string", field="actor")
    if len(value) > MAX_ACTOR or any(ord(char) < 0x20 or char == "\x7f" for char in value):
        raise invalid(
            f"actor must be at most {MAX_ACTOR} characters, without control characters",
            field="actor",
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise invalid("actor must be valid Unicode text", field="actor") from None
    return value


def require_action(value: Any) -> str:
    """One of ``AUDIT_ACTIONS``."""
    if value not in AUDIT_ACTIONS:
        raise invalid(f"action must be one of {sorted(AUDIT_ACTIONS)}", field="action")
    return str(value)


def require_audit_reason(value: Any) -> str | None:
    """None, or text of at most ``MAX_AUDIT_REASON`` characters."""
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > MAX_AUDIT_REASON:
        raise invalid(
            f"reason must be a string of at most {MAX_AUDIT_REASON} characters", field="reason"
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise invalid("reason must be valid Unicode text", field="reason") from None
    return value


class AuditLog:
    """The audit trail in memory (``MemoryBook``'s): the latest ``entries`` of the book,
    and each task's latest ``TASK_AUDIT_ENTRIES``. Not thread-safe: the book locks."""

    def __init__(self, entries: int = 10_000) -> None:
        self._log: deque[AuditEntry] = deque(maxlen=entries)
        self._by_task: dict[str, deque[AuditEntry]] = {}

    def add(
        self, at_ms: int, task_id: str, action: str, actor: str, reason: str | None, outcome: str
    ) -> None:
        """Check and keep one entry."""
        entry = AuditEntry(
            at_ms=at_ms,
            actor=require_actor(actor),
            action=require_action(action),
            task_id=task_id,
            reason=require_audit_reason(reason),
            outcome=outcome,
        )
        self._log.append(entry)
        kept = self._by_task.setdefault(entry.task_id, deque(maxlen=TASK_AUDIT_ENTRIES))
        kept.append(entry)

    def read(
        self, task_id: str | None, since_ms: int | float | None, limit: int
    ) -> list[AuditEntry]:
        """Entries newest first, of one task or all, at or after ``since_ms``, at most
        ``limit`` (1 to ``MAX_AUDIT_PAGE``)."""
        count = require_limit(limit, maximum=MAX_AUDIT_PAGE)
        since = None if since_ms is None else require_non_negative(since_ms, "sinceMs")
        kept = self._log if task_id is None else self._by_task.get(task_id, ())
        found = (e for e in reversed(kept) if since is None or e.at_ms >= since)
        return list(itertools.islice(found, count))


@runtime_checkable
class AuditedBook(Protocol):
    """A book that keeps an audit trail (``MemoryBook``, ``RedisBook``): a cancel given an
    ``actor`` is recorded with it, and so is what ``record_audit`` is told."""

    def audit(
        self, task_id: str | None = None, *, since_ms: int | float | None = None, limit: int = 100
    ) -> list[AuditEntry]:
        """Entries newest first: one task's, or (``task_id`` None) every task's; at or
        after ``since_ms``; at most ``limit`` (1 to ``MAX_AUDIT_PAGE``)."""
        ...

    def record_audit(
        self, task_id: str, action: str, actor: str, reason: str | None, outcome: str
    ) -> None:
        """Record a change of an existing task that another call made (a resend of your
        own: action ``resend``; ``Resender`` records its resends itself, in the resend's
        script call); ``UnknownTaskError`` when there is no such task."""
        ...
