"""The pure async-task state machine: docs/spec.md rule by rule, no I/O.

Every book (in memory, in Redis) follows these functions; the Redis book's Lua is held
to them by a differential test.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._checks import require_integer, require_non_negative, require_positive, require_text
from ._jsrules import is_blank, normalize_number
from ._limits import require_task_id_length
from ._models import (
    AsyncEvent,
    AsyncState,
    AsyncTask,
    AsyncTransition,
    CancelEvent,
    ExpireEvent,
    FailEvent,
    HistoryEntry,
    ProgressEvent,
    StartEvent,
    SucceedEvent,
    parse_event,
)
from ._reasons import Reason
from .errors import invalid

__all__ = ["apply_async_event", "create_async_task", "expire_task"]


def create_async_task(
    *, id: str, now_ms: int | float, ttl_ms: int | float, max_attempts: int
) -> AsyncTask:
    """A new queued task whose result is accepted until ``now_ms + ttl_ms``; an id over
    ``TASK_ID_LIMIT`` characters is refused (``invalid-request``, field ``taskId``)."""
    require_text(id, "id")
    require_task_id_length(id)
    now = require_non_negative(now_ms, "nowMs")
    ttl = require_positive(ttl_ms, "ttlMs")
    attempts = require_integer(max_attempts, "maxAttempts", 1)
    return AsyncTask(
        id=id,
        state=AsyncState.QUEUED,
        expires_at_ms=normalize_number(now + ttl),
        attempts=0,
        max_attempts=attempts,
        progress=0,
        version=0,
        history=(),
    )


def _advance(task: AsyncTask, event: AsyncEvent, **patch: Any) -> AsyncTask:
    version = task.version + 1
    entry = HistoryEntry(version=version, event=event)
    return task.model_copy(update={**patch, "version": version, "history": (*task.history, entry)})


def _unchanged(task: AsyncTask, reason: Reason, duplicate: bool = False) -> AsyncTransition:
    return AsyncTransition(
        task=task, changed=False, duplicate=duplicate, notify=False, reason=reason
    )


def _changed(task: AsyncTask, reason: Reason, *, notify: bool) -> AsyncTransition:
    return AsyncTransition(task=task, changed=True, duplicate=False, notify=notify, reason=reason)


def expire_task(task: AsyncTask) -> AsyncTransition:
    """Expire a live task at its deadline; a terminal task stays as it is."""
    if task.terminal:
        expired = task.state is AsyncState.EXPIRED
        reason = Reason.DUPLICATE_EXPIRE if expired else Reason.TERMINAL_CONFLICT
        return _unchanged(task, reason, expired)
    event = ExpireEvent(at_ms=task.expires_at_ms)
    return _changed(_advance(task, event, state=AsyncState.EXPIRED), Reason.EXPIRED, notify=True)


def cancel_reason(event: CancelEvent) -> str:
    """The error a cancel leaves on the task: its reason, or "cancelled" when blank."""
    return event.reason if event.reason is not None and not is_blank(event.reason) else "cancelled"


def stall_event(at_ms: int | float, timeout_ms: int, retryable: bool) -> FailEvent:
    """The ``fail`` that ends an attempt whose heartbeat stopped (extension)."""
    return FailEvent(
        at_ms=at_ms, error=f"stalled: no heartbeat for {timeout_ms} ms", retryable=retryable
    )


def coerce_event(event: AsyncEvent | Mapping[str, Any]) -> AsyncEvent:
    """An event model as it is, or a wire-format mapping parsed into one."""
    if isinstance(
        event, StartEvent | ProgressEvent | SucceedEvent | FailEvent | ExpireEvent | CancelEvent
    ):
        return event
    return parse_event(event)


def apply_async_event(task: AsyncTask, event: AsyncEvent | Mapping[str, Any]) -> AsyncTransition:
    """The pure transition: what ``event`` does to ``task`` (docs/spec.md, in its order).

    ``event`` is a model, or a wire-format mapping (camelCase keys).
    """
    event = coerce_event(event)
    require_non_negative(event.at_ms, "event.atMs")
    if task.terminal:
        if (
            isinstance(event, SucceedEvent)
            and task.state is AsyncState.SUCCEEDED
            and task.result_hash == event.result_hash
        ):
            return _unchanged(task, Reason.DUPLICATE_RESULT, True)
        if isinstance(event, ExpireEvent) and task.state is AsyncState.EXPIRED:
            return _unchanged(task, Reason.DUPLICATE_EXPIRE, True)
        if isinstance(event, CancelEvent) and task.state is AsyncState.CANCELLED:
            return _unchanged(task, Reason.DUPLICATE_CANCEL, True)
        return _unchanged(task, Reason.TERMINAL_CONFLICT)
    if isinstance(event, ExpireEvent) or event.at_ms >= task.expires_at_ms:
        return expire_task(task)

    if isinstance(event, CancelEvent):
        why = cancel_reason(event)
        cancelled = _advance(task, event, state=AsyncState.CANCELLED, error=why)
        return _changed(cancelled, Reason.CANCELLED, notify=True)

    if isinstance(event, StartEvent):
        if task.state is AsyncState.RUNNING:
            return _unchanged(task, Reason.ALREADY_RUNNING, True)
        if task.state is not AsyncState.QUEUED or task.attempts >= task.max_attempts:
            return _unchanged(task, Reason.NOT_STARTABLE)
        started = _advance(
            task, event, state=AsyncState.RUNNING, attempts=task.attempts + 1, progress=0
        )
        return _changed(started, Reason.STARTED, notify=False)

    if isinstance(event, ProgressEvent):
        if task.state is not AsyncState.RUNNING:
            return _unchanged(task, Reason.NOT_RUNNING)
        progress = require_integer(event.progress, "progress", 0)
        if progress > 100:
            raise invalid("progress must not exceed 100", field="progress")
        if progress < task.progress:
            return _unchanged(task, Reason.STALE_PROGRESS)
        if progress == task.progress:
            return _unchanged(task, Reason.DUPLICATE_PROGRESS, True)
        return _changed(_advance(task, event, progress=progress), Reason.PROGRESS, notify=False)

    if task.state is not AsyncState.RUNNING:
        return _unchanged(task, Reason.NOT_RUNNING)
    if isinstance(event, SucceedEvent):
        if is_blank(event.result_ref):
            raise invalid("resultRef must not be empty", field="resultRef")
        if is_blank(event.result_hash):
            raise invalid("resultHash must not be empty", field="resultHash")
        succeeded = _advance(
            task,
            event,
            state=AsyncState.SUCCEEDED,
            progress=100,
            result_ref=event.result_ref,
            result_hash=event.result_hash,
        )
        return _changed(succeeded, Reason.SUCCEEDED, notify=True)
    if event.retryable and task.attempts < task.max_attempts:
        requeued = _advance(task, event, state=AsyncState.QUEUED, progress=0, error=event.error)
        return _changed(requeued, Reason.REQUEUED, notify=False)
    failed = _advance(task, event, state=AsyncState.FAILED, error=event.error)
    return _changed(failed, Reason.FAILED, notify=True)
