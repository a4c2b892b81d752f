"""``Held``: ``claim_run``'s answer when a live attempt holds the task (one run per task,
extension; ``asyncbook._one_run``)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Held"]


@dataclass(frozen=True)
class Held:
    """``claim_run``'s answer when a live attempt holds the task: nothing changed.

    The holder is overdue at ``stall_at_ms`` (the book's clock, ``now_ms`` at the claim)
    unless it beats again. ``postpone`` is True for one held claim per stall period: no
    delivery postponed to after an earlier stall time is still due, so this one should
    be sent again to arrive after ``stall_at_ms`` (then the holder has ended, beaten on,
    or stalled, and its claim says which); the book notes it is due. False: another
    delivery is already postponed, and this one can be dropped.
    """

    attempts: int
    stall_at_ms: int
    now_ms: int
    postpone: bool
