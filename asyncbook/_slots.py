"""Concurrency limits across workers (extension): the book's slots of a concurrency key.

A key (a tenant, a task name) has a running set, at most ``limit`` task ids, and a FIFO
of waiting task ids, each with the payload that runs it again (the Celery integration
keeps its message there). ``take_slot`` joins the running set if a slot is free and
nothing waits, else joins the end of the waiting line; ``release_slot`` leaves it. Both
then give every free slot to the head of the line, in order, and answer the payloads of
those released, for the caller to send: a waiting task runs when a slot frees, not by
polling.

A member holds its slot while its lease (``lease_ms`` from its take, or from its
release from the line) or its attempt's stall time (``asyncbook_heartbeat_timeout``:
moved on by its heartbeats) is ahead of the book's clock; after both, it is dropped at
the key's next take or release. So every end of the attempt frees its slot: its worker's
release, or, when the worker died or the sweep ended the task, the lapse of its
heartbeat. Keys are independent: one key's line never takes another key's slots.

``claim_run_in_slot`` is a limited start's one call: ``claim_run``, whose start, about to
be granted, first takes the slot; over the limit the task joins the line instead, its
record unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, runtime_checkable

from ._held import Held
from ._models import CallbackResult
from .errors import invalid

__all__ = [
    "KEY_LIMIT",
    "PAYLOAD_LIMIT",
    "Slot",
    "SlotBook",
    "SlotRequest",
    "SlotStart",
    "slot_args",
    "slot_request",
]

KEY_LIMIT = 1024
"""The longest concurrency key, in characters."""
PAYLOAD_LIMIT = 1 << 20
"""The largest payload a waiting task keeps, in characters (a message's body)."""


@dataclass(frozen=True)
class Slot:
    """``take_slot``'s answer: whether ``task_id`` holds a slot now (else it waits in
    line), the payloads of the waiting tasks this call gave a slot, oldest first, and
    how many still wait."""

    granted: bool
    released: tuple[str, ...] = ()
    waiting: int = 0


class SlotRequest(NamedTuple):
    """The slot a limited start takes (``SlotBook.claim_run_in_slot``): its key, limit,
    lease and the payload kept while it waits, as ``take_slot`` takes them."""

    key: str
    limit: int
    lease_ms: int
    payload: str = ""


@dataclass(frozen=True)
class SlotStart:
    """``claim_run_in_slot``'s answer."""

    result: CallbackResult | Held | None
    """``claim_run``'s answer; None when the key had no free slot: the task waits in its
    line (``slot.granted`` is False) and its record is unchanged."""
    slot: Slot | None
    """The slot's take, as ``take_slot`` answers it; None when the start was refused
    before it (held, ended, a callback id seen...): the slots unchanged."""


def _positive(value: Any, field: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise invalid(f"{field} must be an integer of at least 1", field=field)
    return value


def _text(value: Any, field: str, limit: int, empty: bool = False) -> str:
    if not isinstance(value, str) or (not value and not empty):
        raise invalid(f"{field} must be a non-empty string", field=field)
    if len(value) > limit:
        raise invalid(f"{field} must be at most {limit} characters", field=field)
    return value


def slot_args(
    key: Any, task_id: Any, limit: Any, lease_ms: Any, payload: Any = ""
) -> tuple[str, str, int, int, str]:
    """The checked arguments of a slot call (each bad one named: ``key``, ``taskId``,
    ``limit``, ``leaseMs``, ``payload``)."""
    return (
        _text(key, "key", KEY_LIMIT),
        _text(task_id, "taskId", 4096),
        _positive(limit, "limit"),
        _positive(lease_ms, "leaseMs"),
        _text(payload, "payload", PAYLOAD_LIMIT, empty=True),
    )


def slot_request(slot: Any) -> SlotRequest:
    """A checked ``SlotRequest`` (a tuple of 3 or 4 items; each bad one named, as
    ``slot_args`` names them; another value names ``slot``)."""
    if not isinstance(slot, tuple) or len(slot) not in (3, 4):
        raise invalid("slot must be (key, limit, lease_ms[, payload])", field="slot")
    key, _, limit, lease, payload = slot_args(slot[0], "-", *slot[1:])
    return SlotRequest(key, limit, lease, payload)


@runtime_checkable
class SlotBook(Protocol):
    """A book that keeps concurrency slots (``MemoryBook``, ``RedisBook`` of one shard)."""

    def take_slot(
        self, key: str, task_id: str, limit: int, *, lease_ms: int, payload: str = ""
    ) -> Slot:
        """Take a slot of ``key`` for ``task_id`` (kept if it holds one, or one was
        released to it), or join the key's line with ``payload`` (once: a task waiting
        already keeps its place); then give free slots to the line."""
        ...

    def release_slot(self, key: str, task_id: str, limit: int, *, lease_ms: int) -> Slot:
        """Free ``task_id``'s slot of ``key`` (none held: nothing freed), then give free
        slots to the line; ``granted`` is False."""
        ...

    def claim_run_in_slot(
        self,
        task_id: str,
        worker: str,
        slot: SlotRequest,
        *,
        at_ms: int | float | None = None,
        callback_id: str | None = None,
    ) -> SlotStart:
        """``claim_run``, whose start, about to be granted (not held, ended, seen), takes
        ``task_id``'s slot of ``slot.key`` first, in the same call: over the limit the
        task joins the key's line with ``slot.payload`` and nothing else changes."""
        ...
