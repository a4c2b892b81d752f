"""Why a transition or a delivery answered as it did: every reason string, in one place.

The strings are the wire values (and the keys of ``transition_counts``); the table of
which state and event give which reason is in ``docs/spec.md``.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Reason"]


class Reason(StrEnum):
    """The reason of an ``AsyncTransition``, a ``CallbackResult`` or a ``DeliveryResult``."""

    STARTED = "started"
    """A queued task began an attempt: running, attempts + 1, progress 0."""
    ALREADY_RUNNING = "already-running"
    """``start`` on a running task: unchanged, a duplicate."""
    NOT_STARTABLE = "not-startable"
    """``start`` on a task that is not queued, or has no attempt left: unchanged."""
    PROGRESS = "progress"
    """A running task moved forward."""
    STALE_PROGRESS = "stale-progress"
    """``progress`` lower than the task's: unchanged (not a duplicate)."""
    DUPLICATE_PROGRESS = "duplicate-progress"
    """``progress`` equal to the task's: unchanged, a duplicate."""
    NOT_RUNNING = "not-running"
    """``progress``, ``succeed`` or ``fail`` on a task that is not running: unchanged."""
    SUCCEEDED = "succeeded"
    """A running task's result was accepted before the deadline (notifies)."""
    REQUEUED = "requeued"
    """A retryable failure with an attempt left: queued again, progress 0."""
    FAILED = "failed"
    """A failure that is not retryable, or the last attempt's (notifies)."""
    EXPIRED = "expired"
    """The deadline passed first: an ``expire``, or any event at or after the deadline
    (notifies)."""
    DUPLICATE_EXPIRE = "duplicate-expire"
    """``expire`` on an expired task: unchanged, a duplicate."""
    DUPLICATE_RESULT = "duplicate-result"
    """``succeed`` with the same result hash on a succeeded task: unchanged, a duplicate."""
    TERMINAL_CONFLICT = "terminal-conflict"
    """Any other event on a terminal task: unchanged (terminal states absorb)."""
    CANCELLED = "cancelled"
    """Extension: a queued or running task was cancelled before its deadline (notifies)."""
    DUPLICATE_CANCEL = "duplicate-cancel"
    """Extension: ``cancel`` on a cancelled task: unchanged, a duplicate."""
    DUPLICATE_CALLBACK = "duplicate-callback"
    """The callback id was recorded before (on any task): unchanged, not even validated."""
    DELIVERED = "delivered"
    """Delivery: the result was handed over and a receipt stored under the key."""
    DUPLICATE_DELIVERY = "duplicate-delivery"
    """Delivery: the key was used for this task before; the first receipt again."""
    KEY_REUSED_FOR_OTHER_TASK = "key-reused-for-other-task"
    """Delivery: the key was used for another task; refused."""
    NOT_SUCCEEDED = "not-succeeded"
    """Delivery: the task has no result (it is not succeeded); refused."""
