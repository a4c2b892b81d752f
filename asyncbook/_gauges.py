"""What ``/metrics`` reads of a book beyond its counts: the notification streams (their
length, and the backlog of each consumer group reading them) and the workers seen
recently. A ``RedisBook`` reads all of it in one pipelined round trip (``gauges``).
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["GAUGE_WORKERS_LIMIT", "GAUGE_WORKERS_WITHIN_MS", "BookGauges", "GroupBacklog"]

GAUGE_WORKERS_WITHIN_MS = 3_600_000
"""Workers seen within this long are listed (older ones drop out of the metrics)."""
GAUGE_WORKERS_LIMIT = 500
"""At most this many workers are listed, the most recently seen first."""


class GroupBacklog(NamedTuple):
    """One consumer group reading one of the book's notification streams."""

    stream: str
    """``tasks`` (the outbox) or ``groups`` (the group outbox)."""
    group: str
    """The consumer group's name."""
    pending: int
    """Entries delivered to a consumer and not acknowledged yet."""
    lag: int | None
    """Entries not delivered yet (None: Redis cannot tell, after entries were deleted)."""
    length: int
    """The stream's length when read."""

    @property
    def backlog(self) -> int:
        """Entries the group has not acknowledged: pending plus lag (the stream's length
        when the lag is unknown, an upper bound)."""
        return self.pending + (self.length if self.lag is None else self.lag)


class BookGauges(NamedTuple):
    """The streams' lengths, their consumer groups' backlogs and the workers seen."""

    stream_lengths: dict[str, int]
    """Entries in each notification stream, by stream (``tasks``, ``groups``)."""
    groups: tuple[GroupBacklog, ...]
    """Every consumer group of either stream."""
    workers_seen: tuple[tuple[str, float], ...]
    """(worker, when last seen in ms), the most recently seen first."""
