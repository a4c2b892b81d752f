"""One run per task (extension): ``claim_run``, a start that takes the run unless a live
attempt holds the task, and what every book records for a delivery it refused."""

from __future__ import annotations

from typing import Any

from ._audit import require_actor
from ._book import EventInput
from ._held import Held
from .errors import AsyncBookError, invalid

__all__ = ["HELD", "SUPPRESS", "Held", "held_reason", "require_worker", "start_input"]

SUPPRESS = "suppress"
"""The audit action of a delivery not run because a live attempt held its task."""
HELD = "held"
"""That entry's outcome."""


def held_reason(attempts: int) -> str:
    """That entry's reason: the attempt that holds the task."""
    return f"attempt {attempts} is running"


def require_worker(value: Any) -> str:
    """The worker claiming a run: an actor name (it is named in the audit entry)."""
    try:
        return require_actor(value)
    except AsyncBookError as error:
        raise invalid(error.message.replace("actor", "worker", 1), field="worker") from None


def start_input(at_ms: Any, worker: str) -> EventInput:
    """The wire form of the claiming ``start`` event (a bad ``at_ms`` names its field)."""
    return {"type": "start", "atMs": at_ms, "worker": worker}
