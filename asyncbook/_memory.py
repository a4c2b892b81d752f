"""``MemoryBook``: the reference's AsyncBook in one process, guarded by a lock.

The pure in-memory book: what every other book is tested against (the contract and
differential tests), so every call of the protocol is here, each one under the book's
one lock, each one applying ``_machine``'s transitions to plain dicts. What is not a
task's own state lives beside it in objects the book locks for: the groups
(``MemoryGroups``, as the Redis book's group keys) and the audit trail (``AuditLog``).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import TypeVar, Unpack

from ._audit import AuditEntry, AuditLog, require_actor
from ._book import (
    ApplyItem,
    CreateOptions,
    CreateSending,
    CreateSpec,
    EventInput,
    EventsScript,
    HeldWrites,
    cancel_input,
    sort_notifications,
)
from ._checks import (
    require_heartbeat_timeout,
    require_integer,
    require_limit,
    require_non_negative,
    require_optional_string,
    require_page_cursor,
    require_state,
    require_string,
    require_text,
)
from ._machine import apply_async_event, coerce_event, create_async_task
from ._memory_cancels import MemoryCancelCalls
from ._memory_groups import MemoryGroups
from ._memory_slots import MemorySlotCalls, MemorySlots
from ._memory_stalls import MemoryStalls
from ._models import (
    AsyncState,
    AsyncTask,
    AsyncTransition,
    CallbackResult,
    DeliveryReceipt,
    DeliveryResult,
    ExpireEvent,
    GroupNotification,
    GroupSummary,
    Notification,
    ProgressEvent,
    ResumeResult,
    TaskPage,
)
from ._one_run import HELD, SUPPRESS, Held, held_reason, require_worker, start_input
from ._output import MemoryOutputs, OutputAppend, OutputPage
from ._reasons import Reason
from ._slots import Slot, SlotRequest
from .errors import AsyncBookError, UnknownTaskError, task_exists

__all__ = ["MemoryBook"]


def _without_history(task: AsyncTask) -> AsyncTask:
    return task.model_copy(update={"history": ()})


_Result = TypeVar("_Result", bound=AsyncTransition)


def _each(
    calls: Sequence[Callable[[], _Result]], full_task: bool
) -> list[_Result | AsyncBookError]:
    """Run each call, keeping its error in place; drop histories unless ``full_task``."""
    results: list[_Result | AsyncBookError] = []
    for call in calls:
        try:
            result = call()
        except AsyncBookError as error:
            results.append(error)
            continue
        if not full_task:
            result = result.model_copy(update={"task": _without_history(result.task)})
        results.append(result)
    return results


class MemoryBook(MemorySlotCalls, MemoryCancelCalls):
    """An in-process book: the exact semantics of docs/spec.md, nothing durable, nothing expires."""

    def __init__(self, retention_versions: int = 8) -> None:
        self.retention_versions = require_integer(retention_versions, "retention_versions")
        self._lock = threading.Lock()
        self._tasks: dict[str, AsyncTask] = {}
        self._callbacks: dict[str, tuple[str, int | float]] = {}
        self._notifications: dict[tuple[str, str, int], Notification] = {}
        self._deliveries: dict[str, DeliveryReceipt] = {}
        self._created: dict[str, int] = {}
        self._reasons: Counter[str] = Counter()
        self._sequence = itertools.count(1)
        self._stalls = MemoryStalls()
        self._slots = MemorySlots(self._stalls.stall_of)
        self._cursors: dict[str, str] = {}
        self._groups = MemoryGroups()
        self._last_sweep_ms: int | None = None
        self._audit = AuditLog()
        self._outputs = MemoryOutputs()

    def _task(self, task_id: object) -> AsyncTask:
        task = self._tasks.get(require_string(task_id, "taskId"))
        if task is None:
            raise UnknownTaskError(str(task_id))
        return task

    def create(self, **options: Unpack[CreateOptions]) -> AsyncTask:
        """Store a new queued task; an existing id is ``conflict`` unless ``exist_ok``.

        ``info`` (the console's) is kept by RedisBook only; this book has no console."""
        spec = CreateSpec(**options)
        id = spec.id
        task = create_async_task(
            id=id, now_ms=spec.now_ms, ttl_ms=spec.ttl_ms, max_attempts=spec.max_attempts
        )
        timeout = require_heartbeat_timeout(spec.heartbeat_timeout_ms)
        group = None if spec.group_id is None else require_text(spec.group_id, "groupId")
        with self._lock:
            existing = self._tasks.get(id)
            if existing is not None:
                if spec.exist_ok:
                    return existing
                raise task_exists(id)
            self._tasks[id] = task
            self._created[id] = next(self._sequence)
            if timeout is not None:
                self._stalls.timed(id, timeout, bool(spec.retry_on_stall))
            if group is not None:
                self._groups.join(id, group)
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
            self._reasons[Reason.DUPLICATE_CALLBACK] += 1
            return CallbackResult(
                task=task,
                changed=False,
                duplicate=True,
                notify=False,
                reason=Reason.DUPLICATE_CALLBACK,
                duplicate_callback=True,
            )
        parsed = coerce_event(event)
        result = apply_async_event(task, parsed)
        self._reasons[result.reason] += 1
        if result.changed:
            self._tasks[task_id] = result.task
        if callback_id is not None:
            self._callbacks[callback_id] = (task_id, parsed.at_ms)
        if result.notify:
            key = (task_id, result.task.state.value, result.task.version)
            if key not in self._notifications:
                self._notifications[key] = Notification(
                    task_id=task_id,
                    state=result.task.state,
                    at_ms=parsed.at_ms,
                    version=result.task.version,
                )
        if isinstance(parsed, ProgressEvent) and result.changed:
            self._cursors[task_id] = parsed.cursor
        self._stalls.note(task_id, parsed, result, self.now_ms())
        self._groups.note(task_id, task, parsed, result)
        return CallbackResult(**dict(result), duplicate_callback=False)

    def seal_group(self, group_id: str, total: int) -> GroupSummary:
        """Declare the group's size: once that many members ended, one group notification."""
        group = require_text(group_id, "groupId")
        size = require_integer(total, "total", 1)
        with self._lock:
            return self._groups.seal(group, size, self.now_ms())

    def group(self, group_id: str) -> GroupSummary | None:
        """The group's counts by state and mean progress, in O(1); None if unknown."""
        group = require_text(group_id, "groupId")
        with self._lock:
            return self._groups.summary(group)

    def group_members(self, group_id: str, limit: int = 100) -> list[AsyncTask]:
        """The group's members in creation order, without histories."""
        group = require_text(group_id, "groupId")
        count = require_limit(limit, maximum=10_000)
        with self._lock:
            ids = self._groups.members(group, count)
            return [_without_history(self._tasks[task_id]) for task_id in ids]

    def drain_group_notifications(self) -> list[GroupNotification]:
        """Every pending group notification, in order; empties them."""
        with self._lock:
            return self._groups.drain()

    def heartbeat(self, task_ids: Iterable[str]) -> int:
        """Say that these tasks' running attempts are alive (no version bump)."""
        ids = [require_string(task_id, "taskId") for task_id in task_ids]
        now = self.now_ms()
        with self._lock:
            return self._stalls.beat(ids, now)

    def end_stalled(
        self, now_ms: int | float | None = None, limit: int = 1000
    ) -> list[CallbackResult | AsyncBookError]:
        """Fail every running task whose heartbeat is overdue (extension)."""
        now = self.now_ms() if now_ms is None else require_non_negative(now_ms, "nowMs")
        count = require_limit(limit, maximum=1_000_000)
        with self._lock:
            due = self._stalls.due(now, count)
            return [self._apply(task_id, event, callback) for task_id, event, callback in due]

    def last_cursor(self, task_id: str) -> str | None:
        """The cursor of the last progress the task reported, or None."""
        self._task(task_id)
        return self._cursors.get(task_id) or None

    def append_output(self, task_id: str, *chunks: str) -> OutputAppend:
        """Append chunks to a running task's output, labelled with its attempt."""
        with self._lock:
            task = self._tasks.get(require_string(task_id, "taskId"))
            return self._outputs.append(task, task_id, chunks, self.now_ms())

    def output(self, task_id: str, cursor: int | str = 0, limit: int = 1000) -> OutputPage:
        """The task's output chunks after ``cursor`` (a chunk's ``seq``; 0: from the start)."""
        with self._lock:
            return self._outputs.read(self._task(task_id), cursor, limit)

    def expire(self, task_id: str) -> AsyncTransition:
        """Expire the task at its deadline, as the sweep does (notified at the deadline)."""
        with self._lock:
            task = self._task(task_id)
            result = self._apply(task_id, ExpireEvent(at_ms=task.expires_at_ms), None)
            return result.transition()

    def cancel(
        self,
        task_id: str,
        reason: str | None = None,
        *,
        at_ms: int | float | None = None,
        callback_id: str | None = None,
        actor: str | None = None,
    ) -> CallbackResult:
        """Cancel a queued or running task (extension): ``apply`` of a ``cancel`` event;
        audited with ``actor`` (``AsyncBook.cancel``)."""
        who = None if actor is None else require_actor(actor)
        at = self.now_ms() if at_ms is None else at_ms
        result = self.apply(task_id, cancel_input(at, reason), callback_id)
        if who is not None:
            given = reason if isinstance(reason, str) else None
            with self._lock:
                self._audit.add(self.now_ms(), task_id, "cancel", who, given, result.reason)
        return result

    def _claim_run(
        self,
        task_id: str,
        worker: str,
        at_ms: int | float | None,
        callback_id: str | None,
        slot: SlotRequest | None,
    ) -> tuple[CallbackResult | Held | None, Slot | None]:
        """``claim_run``, or ``claim_run_in_slot`` (with ``slot``): None for a task that
        waits for its slot, and the slot's take."""
        who = require_worker(worker)
        event = start_input(self.now_ms() if at_ms is None else at_ms, who)
        with self._lock:
            task = self._task(task_id)
            callback = require_optional_string(callback_id, "callbackId")
            taken = None
            if callback is None or callback not in self._callbacks:
                parsed = coerce_event(event)  # a bad shape raises as apply's would
                now = self.now_ms()
                holder = self._stalls.holder(task, parsed.at_ms, now)
                if isinstance(holder, Held):
                    reason = held_reason(task.attempts)
                    self._audit.add(now, task_id, SUPPRESS, who, reason, HELD)
                    return holder, None
                if holder is not None:
                    self._apply(task_id, *holder)
                task = self._task(task_id)
                if slot is not None and apply_async_event(task, parsed).reason == Reason.STARTED:
                    key, limit, lease, payload = slot
                    taken = self._slots.take(key, task_id, limit, lease, payload, now)
                    if not taken.granted:
                        return None, taken
            return self._apply(task_id, event, callback_id), taken

    def audit(
        self, task_id: str | None = None, *, since_ms: int | float | None = None, limit: int = 100
    ) -> list[AuditEntry]:
        """Audit entries, newest first: the task's, or (no ``task_id``) the book's."""
        with self._lock:
            return self._audit.read(task_id, since_ms, limit)

    def record_audit(
        self, task_id: str, action: str, actor: str, reason: str | None, outcome: str
    ) -> None:
        """Record a change another call made to an existing task (a resend of your own;
        ``Resender`` records its resends itself): one entry."""
        with self._lock:
            self._task(task_id)
            self._audit.add(self.now_ms(), task_id, action, actor, reason, outcome)

    def resume(self, task_id: str, cursor_version: int, *, full_task: bool = True) -> ResumeResult:
        """What changed after ``cursor_version``: caught-up, a delta, or a snapshot.

        With ``full_task=False`` a caught-up or delta answer carries the task without its
        history (a snapshot always carries it).
        """
        task = self._task(task_id)
        cursor = require_integer(cursor_version, "cursorVersion")
        if task.version - cursor > self.retention_versions:
            return ResumeResult(mode="snapshot", events=(), task=task)
        shown = task if full_task else _without_history(task)
        if task.version <= cursor:
            return ResumeResult(mode="caught-up", events=(), task=shown)
        return ResumeResult(mode="delta", events=task.history[cursor:], task=shown)

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
                        ok=True, duplicate=True, reason=Reason.DUPLICATE_DELIVERY, receipt=existing
                    )
                reused = Reason.KEY_REUSED_FOR_OTHER_TASK
                return DeliveryResult(ok=False, duplicate=True, reason=reused, receipt=existing)
            task = self._task(task_id)
            if task.result_ref is None or task.result_hash is None or task.state != "succeeded":
                return DeliveryResult(ok=False, duplicate=False, reason=Reason.NOT_SUCCEEDED)
            receipt = DeliveryReceipt(
                task_id=task_id,
                result_ref=task.result_ref,
                result_hash=task.result_hash,
                idempotency_key=idempotency_key,
                delivered_at_ms=delivered_at,
            )
            self._deliveries[idempotency_key] = receipt
            return DeliveryResult(
                ok=True, duplicate=False, reason=Reason.DELIVERED, receipt=receipt
            )

    def drain_notifications(self) -> list[Notification]:
        """Every pending notification, sorted by task id then time; empties the outbox."""
        with self._lock:
            pending = list(self._notifications.values())
            self._notifications.clear()
        return sort_notifications(pending)

    def apply_many(
        self, items: Iterable[ApplyItem], *, full_task: bool = True
    ) -> list[CallbackResult | AsyncBookError]:
        """Apply many events, each atomic on its own; errors are returned in place.

        With ``full_task=False`` each result's task comes without its history.
        """
        return _each([partial(self.apply, *item) for item in items], full_task)

    def expire_many(
        self, task_ids: Iterable[str], *, full_task: bool = True
    ) -> list[AsyncTransition | AsyncBookError]:
        """Expire many tasks at their deadlines; errors are returned in place."""
        return _each([partial(self.expire, task_id) for task_id in task_ids], full_task)

    def now_ms(self) -> int:
        """This process's clock (the in-memory book has no other)."""
        return int(time.time() * 1000)

    def count_by_state(self) -> dict[str, int]:
        """How many tasks are in each state."""
        with self._lock:
            counts = Counter(task.state.value for task in self._tasks.values())
        return {state.value: counts[state.value] for state in AsyncState}

    def transition_counts(self) -> dict[str, int]:
        """How many times each reason was answered."""
        with self._lock:
            return dict(self._reasons)

    def overdue(self, now_ms: int | float, limit: int = 1000) -> list[str]:
        """Ids of live tasks whose deadline is at or before ``now_ms``, earliest first."""
        now = require_non_negative(now_ms, "nowMs")
        count = require_limit(limit, maximum=1_000_000)
        with self._lock:
            due = [t for t in self._tasks.values() if not t.terminal and t.expires_at_ms <= now]
        due.sort(key=lambda task: (task.expires_at_ms, task.id.encode()))  # Redis's order
        return [task.id for task in due[:count]]

    def overdue_count(self, now_ms: int | float) -> int:
        """How many live tasks have a deadline at or before ``now_ms``."""
        now = require_non_negative(now_ms, "nowMs")
        with self._lock:
            return sum(not t.terminal and t.expires_at_ms <= now for t in self._tasks.values())

    def record_sweep(self, at_ms: int | float) -> None:
        """Note that a sweep ran at ``at_ms``."""
        self._last_sweep_ms = int(require_non_negative(at_ms, "atMs"))

    def last_sweep_ms(self) -> int | None:
        """When a sweep last ran, or None if none ever did."""
        return self._last_sweep_ms

    def list_tasks(
        self,
        state: str | None = None,
        limit: int = 50,
        after: str | None = None,
        *,
        full_task: bool = True,
    ) -> TaskPage:
        """Tasks, newest first, optionally in one state; ``after`` continues a page.

        With ``full_task=False`` the listed tasks come without their histories.
        """
        wanted = require_state(state)
        count = require_limit(limit)
        cursor = require_page_cursor(after)
        with self._lock:
            page: list[AsyncTask] = []
            for task_id, sequence in reversed(self._created.items()):  # newest first
                if cursor is not None and sequence >= cursor:
                    continue
                task = self._tasks[task_id]
                if wanted is None or task.state == wanted:
                    page.append(task if full_task else _without_history(task))
                    if len(page) > count:
                        break
        more = len(page) > count
        page = page[:count]
        next_after = str(self._created[page[-1].id]) if more and page else None
        return TaskPage(tasks=tuple(page), next_after=next_after)

    # -- capabilities (AsyncBook): a book in memory has none of the optional ones -------

    def create_many(self, specs: Iterable[CreateSpec]) -> list[AsyncTask | AsyncBookError]:
        """``create`` for each spec; a spec the book refuses answers its error in place."""
        results: list[AsyncTask | AsyncBookError] = []
        for spec in specs:
            try:
                results.append(self.create(**spec._asdict()))
            except AsyncBookError as error:
                results.append(error)
        return results

    def create_sender(self) -> CreateSending | None:
        """None: a create here is done when ``create`` returns."""
        return None

    def wait_for_writes(self, writes: HeldWrites) -> None:
        """Nothing to wait for: this book has no ``create_sender``."""

    def watch_cancels(
        self,
        on_cancel: Callable[[str], None],
        *,
        on_subscribe: Callable[[], None],
        stop: Callable[[], bool],
    ) -> Callable[[], None] | None:
        """None: this book publishes no cancels."""
        return None

    def async_twin(self) -> object | None:
        """None: a book in memory has no asyncio twin."""
        return None

    def script_beside(self, client: object, source: str) -> EventsScript | None:
        """None: this book lives on no Redis server."""
        return None
