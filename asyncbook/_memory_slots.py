"""``MemorySlots``: a book in memory's concurrency slots (``MemoryBook``'s; the Redis
book's are lua/slots.lua). The rules are ``asyncbook._slots``'s. Not thread-safe: the
book locks."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from ._held import Held
from ._models import CallbackResult
from ._slots import Slot, SlotRequest, SlotStart, slot_args, slot_request

__all__ = ["MemorySlotCalls", "MemorySlots"]


@dataclass
class _Key:
    running: dict[str, int] = field(default_factory=dict)
    """Task id -> its lease's end (ms)."""
    line: deque[str] = field(default_factory=deque)
    payloads: dict[str, str] = field(default_factory=dict)


class MemorySlots:
    """Each concurrency key's running set and line; ``stall_of`` answers a running
    attempt's stall time (the book's heartbeat clocks)."""

    def __init__(self, stall_of: Callable[[str], int | None]) -> None:
        self._keys: dict[str, _Key] = {}
        self._stall_of = stall_of

    def _live(self, key: str, now: int) -> _Key:
        slots = self._keys.setdefault(key, _Key())
        for task_id, lease in list(slots.running.items()):
            if lease > now:
                continue
            stall = self._stall_of(task_id)
            if stall is not None and stall > now:
                slots.running[task_id] = stall  # kept by its heartbeats: lease to then
            else:
                del slots.running[task_id]
        return slots

    def take(self, key: str, task_id: str, limit: int, lease: int, payload: str, now: int) -> Slot:
        slots = self._live(key, now)
        granted = task_id in slots.running or (len(slots.running) < limit and not slots.line)
        if granted:
            slots.running[task_id] = max(slots.running.get(task_id, 0), now + lease)
        elif task_id not in slots.payloads:
            slots.payloads[task_id] = payload
            slots.line.append(task_id)
        released = self._fill(key, slots, limit, lease, now)
        return Slot(granted, released, len(slots.line))

    def release(self, key: str, task_id: str, limit: int, lease: int, now: int) -> Slot:
        slots = self._live(key, now)
        slots.running.pop(task_id, None)
        released = self._fill(key, slots, limit, lease, now)
        return Slot(False, released, len(slots.line))

    def _fill(self, key: str, slots: _Key, limit: int, lease: int, now: int) -> tuple[str, ...]:
        released = []
        while len(slots.running) < limit and slots.line:
            task_id = slots.line.popleft()
            slots.running[task_id] = now + lease
            released.append(slots.payloads.pop(task_id))
        if not slots.running and not slots.line:
            del self._keys[key]
        return tuple(released)


class MemorySlotCalls:
    """``MemoryBook``'s slot calls (``SlotBook``), under the book's lock, and its
    ``claim_run`` (the slot's claim without a slot)."""

    _lock: threading.Lock
    _slots: MemorySlots
    _claim_run: Callable[
        [str, str, int | float | None, str | None, SlotRequest | None],
        tuple[CallbackResult | Held | None, Slot | None],
    ]
    """MemoryBook's claim: ``claim_run``, or with a slot, ``claim_run_in_slot``."""

    def now_ms(self) -> int:
        raise NotImplementedError  # MemoryBook's clock

    def claim_run(
        self,
        task_id: str,
        worker: str,
        *,
        at_ms: int | float | None = None,
        callback_id: str | None = None,
    ) -> CallbackResult | Held:
        """Start the task unless a live attempt holds it (``AsyncBook.claim_run``)."""
        result = self._claim_run(task_id, worker, at_ms, callback_id, None)[0]
        assert result is not None  # waits only for a slot
        return result

    def claim_run_in_slot(
        self,
        task_id: str,
        worker: str,
        slot: SlotRequest,
        *,
        at_ms: int | float | None = None,
        callback_id: str | None = None,
    ) -> SlotStart:
        """A limited start: the claim and the slot together (``SlotBook.claim_run_in_slot``)."""
        request = slot_request(slot)
        return SlotStart(*self._claim_run(task_id, worker, at_ms, callback_id, request))

    def take_slot(
        self, key: str, task_id: str, limit: int, *, lease_ms: int, payload: str = ""
    ) -> Slot:
        """Take a slot of ``key``, or wait in its line (``SlotBook.take_slot``)."""
        key, task_id, limit, lease_ms, payload = slot_args(key, task_id, limit, lease_ms, payload)
        with self._lock:
            return self._slots.take(key, task_id, limit, lease_ms, payload, self.now_ms())

    def release_slot(self, key: str, task_id: str, limit: int, *, lease_ms: int) -> Slot:
        """Free a slot of ``key`` (``SlotBook.release_slot``)."""
        key, task_id, limit, lease_ms, _ = slot_args(key, task_id, limit, lease_ms)
        with self._lock:
            return self._slots.release(key, task_id, limit, lease_ms, self.now_ms())
