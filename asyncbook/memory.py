"""``MemoryBook``: the reference's AsyncBook in one process, guarded by a lock."""

from __future__ import annotations

import threading

from .book import EventInput
from .checks import (
    require_integer,
    require_non_negative,
    require_optional_string,
    require_string,
    require_text,
)
from .errors import AsyncBookError, UnknownTaskError
from .jsrules import utf16_key
from .machine import apply_async_event, coerce_event, create_async_task
from .models import (
    AsyncTask,
    AsyncTransition,
    CallbackResult,
    DeliveryReceipt,
    DeliveryResult,
    ExpireEvent,
    Notification,
    ResumeResult,
)

__all__ = ["MemoryBook", "sort_notifications"]


def sort_notifications(notifications: list[Notification]) -> list[Notification]:
    """The reference's drain order: task id by UTF-16 code units, then time (stable)."""
    return sorted(notifications, key=lambda note: (utf16_key(note.task_id), note.at_ms))


class MemoryBook:
    """An in-process book: exact SPEC semantics, nothing durable, nothing expires."""

    def __init__(self, retention_versions: int = 8) -> None:
        self.retention_versions = require_integer(retention_versions, "retention_versions")
        self._lock = threading.Lock()
        self._tasks: dict[str, AsyncTask] = {}
        self._callbacks: dict[str, tuple[str, int | float]] = {}
        self._notifications: dict[tuple[str, str, int], Notification] = {}
        self._deliveries: dict[str, DeliveryReceipt] = {}

    def _task(self, task_id: object) -> AsyncTask:
        task = self._tasks.get(require_string(task_id, "taskId"))
        if task is None:
            raise UnknownTaskError(str(task_id))
        return task

    def create(
        self,
        *,
        id: str,
        now_ms: int | float,
        ttl_ms: int | float,
        max_attempts: int,
        exist_ok: bool = False,
    ) -> AsyncTask:
        """Store a new queued task; an existing id is ``conflict`` unless ``exist_ok``."""
        task = create_async_task(id=id, now_ms=now_ms, ttl_ms=ttl_ms, max_attempts=max_attempts)
        with self._lock:
            existing = self._tasks.get(id)
            if existing is not None:
                if exist_ok:
                    return existing
                raise AsyncBookError("conflict", f"async-task: task {id!r} exists", field="id")
            self._tasks[id] = task
            return task

    def get(self, id: str) -> AsyncTask | None:
        """The stored task, or None."""
        return self._tasks.get(require_string(id, "id"))

    def apply(
        self, task_id: str, event: EventInput, callback_id: str | None = None
    ) -> CallbackResult:
        """Apply one event; a callback id already recorded changes nothing."""
        with self._lock:
            return self._apply(task_id, event, callback_id)

    def _apply(self, task_id: str, event: EventInput, callback_id: str | None) -> CallbackResult:
        task = self._task(task_id)
        callback_id = require_optional_string(callback_id, "callbackId")
        if callback_id is not None and callback_id in self._callbacks:
            return CallbackResult(
                task=task,
                changed=False,
                duplicate=True,
                notify=False,
                reason="duplicate-callback",
                duplicate_callback=True,
            )
        parsed = coerce_event(event)
        result = apply_async_event(task, parsed)
        if result.changed:
            self._tasks[task_id] = result.task
        if callback_id is not None:
            self._callbacks[callback_id] = (task_id, parsed.at_ms)
        if result.notify:
            key = (task_id, result.task.state.value, result.task.version)
            if key not in self._notifications:
                self._notifications[key] = Notification(
                    task_id=task_id, state=result.task.state, at_ms=parsed.at_ms
                )
        return CallbackResult(**dict(result), duplicate_callback=False)

    def expire(self, task_id: str) -> AsyncTransition:
        """Expire the task at its deadline, as the sweep does (notified at the deadline)."""
        with self._lock:
            task = self._task(task_id)
            result = self._apply(task_id, ExpireEvent(at_ms=task.expires_at_ms), None)
            return AsyncTransition(**{k: v for k, v in result if k != "duplicate_callback"})

    def resume(self, task_id: str, cursor_version: int) -> ResumeResult:
        """What changed after ``cursor_version``: caught-up, a delta, or a snapshot."""
        task = self._task(task_id)
        cursor = require_integer(cursor_version, "cursorVersion")
        if task.version <= cursor:
            return ResumeResult(mode="caught-up", events=(), task=task)
        if task.version - cursor > self.retention_versions:
            return ResumeResult(mode="snapshot", events=(), task=task)
        return ResumeResult(mode="delta", events=task.history[cursor:], task=task)

    def deliver_result(
        self, task_id: str, idempotency_key: str, now_ms: int | float
    ) -> DeliveryResult:
        """Hand the result over once per idempotency key."""
        require_text(idempotency_key, "idempotencyKey")
        delivered_at = require_non_negative(now_ms, "nowMs")
        with self._lock:
            existing = self._deliveries.get(idempotency_key)
            if existing is not None:
                if existing.task_id == task_id:
                    return DeliveryResult(
                        ok=True, duplicate=True, reason="duplicate-delivery", receipt=existing
                    )
                return DeliveryResult(
                    ok=False, duplicate=True, reason="key-reused-for-other-task", receipt=existing
                )
            task = self._task(task_id)
            if task.result_ref is None or task.result_hash is None or task.state != "succeeded":
                return DeliveryResult(ok=False, duplicate=False, reason="not-succeeded")
            receipt = DeliveryReceipt(
                task_id=task_id,
                result_ref=task.result_ref,
                result_hash=task.result_hash,
                idempotency_key=idempotency_key,
                delivered_at_ms=delivered_at,
            )
            self._deliveries[idempotency_key] = receipt
            return DeliveryResult(ok=True, duplicate=False, reason="delivered", receipt=receipt)

    def drain_notifications(self) -> list[Notification]:
        """Every pending notification, sorted by task id then time; empties the outbox."""
        with self._lock:
            pending = list(self._notifications.values())
            self._notifications.clear()
        return sort_notifications(pending)
