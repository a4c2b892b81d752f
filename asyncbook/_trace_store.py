"""A book that keeps each task's trace context (``PublishInfo.trace``) beside its record
and reads it back for many tasks at once (``RedisBook``): the Celery integration records
an end no worker saw in the task's trace (``asyncbook_tracing``, docs/tracing.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol, runtime_checkable

from ._delivery import NotificationSource

__all__ = ["StoredTrace", "TraceStore"]


class StoredTrace(NamedTuple):
    """A task's stored trace context, its name and its error (a failure's, as recorded)."""

    trace: str
    name: str | None
    error: str | None


@runtime_checkable
class TraceStore(NotificationSource, Protocol):
    """An outbox read with acknowledgement, and the tasks' stored trace contexts."""

    def stored_traces(self, task_ids: Sequence[str]) -> dict[str, StoredTrace]:
        """Each task's stored trace context, for those of ``task_ids`` that have one."""
        ...
