"""Waiting for replicas: a book's ``wait_replicas`` setting sends ``WAIT n timeout``
right after each of its writing scripts, in the same pipeline (one round trip, on the
connection that wrote), and refuses the answer if fewer replicas acknowledged it. The
drivers send it (``_driver``); this module says how many, after which scripts, and
reads the answer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from redis.exceptions import ResponseError

from ..errors import NotReplicatedError, invalid
from ._connection import RedisUnavailableError
from ._scripts import READING_SCRIPTS

__all__ = ["ReplicaWait"]


@dataclass(frozen=True)
class ReplicaWait:
    """How many replicas a write waits for (0: none, no WAIT sent) and for how long."""

    replicas: int = 0
    timeout_ms: int = 1000

    def __post_init__(self) -> None:
        for name, value in (("wait_replicas", self.replicas), ("wait_timeout_ms", self.timeout_ms)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise invalid(f"{name} must be a non-negative int, not {value!r}", field=name)
        if self.replicas and not self.timeout_ms:
            raise invalid(
                "wait_timeout_ms must be positive (0 would wait for ever)", field="wait_timeout_ms"
            )

    def waits_after(self, script_name: str) -> bool:
        """True if a call of the book's script ``script_name`` is followed by WAIT."""
        return self.replicas > 0 and script_name not in READING_SCRIPTS

    def check(self, acknowledged: Any) -> None:
        """Raise ``NotReplicatedError`` if WAIT's reply counts fewer replicas than asked;
        ``RedisUnavailableError`` if the node answered WAIT as a replica (a failover made
        it one: the write before it is not acknowledged, and safe to send again)."""
        if isinstance(acknowledged, ResponseError) and "replica" in str(acknowledged):
            raise RedisUnavailableError(
                f"the book's node is a replica now: {acknowledged}"
            ) from acknowledged
        if isinstance(acknowledged, Exception):
            raise acknowledged
        if int(acknowledged) < self.replicas:
            raise NotReplicatedError(self.replicas, int(acknowledged), self.timeout_ms)
