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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from .errors import invalid

__all__ = ["KEY_LIMIT", "PAYLOAD_LIMIT", "Slot", "SlotBook", "slot_args"]

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
