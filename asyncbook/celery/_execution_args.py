"""The ARGV record of ``lua/execution.lua``, the result backend's one script call."""

from __future__ import annotations

from ..redis._script_args import ScriptArgs

__all__ = ["ExecutionArgs"]


class ExecutionArgs(ScriptArgs):
    """ARGV of execution.lua; ``RedisBook.apply_in_script`` appends the events."""

    meta: str | bytes
    """Celery's result meta, encoded as Celery encodes it."""
    expires_s: int
    """Its expiry in seconds (0: none)."""
    guard: str
    """json | none | keep: Celery's SUCCESS guard (see execution.lua)."""
    refused_states: str
    """The book states ('|st|' separated) for which no meta is written."""
