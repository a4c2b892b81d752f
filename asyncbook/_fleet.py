"""Live workers: the record each worker's main process renews in the book, and what it
tells of the fleet (who is online, which queues nobody consumes).

A worker of an app that calls ``install()`` announces itself once every
``WORKER_RENEW_S`` seconds from a thread of its main process (never from a task's
write): its node name, host, pid, versions, pool and concurrency, prefetch, queues, when
it started, its running tasks and the host's load. It is *online* while its record is
fresher than ``WORKER_SILENCE_MS`` and *offline* after that silence, or at once when it
shuts down gracefully. An offline worker's last record is kept ``WORKER_HISTORY_MS``
(at most ``WORKER_RECORDS_KEPT`` workers, the most recently renewed).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol, runtime_checkable

from pydantic import StrictInt, StrictStr

from ._models import Number, WireModel

__all__ = [
    "WORKER_HISTORY_MS",
    "WORKER_RECORDS_KEPT",
    "WORKER_RENEW_S",
    "WORKER_SILENCE_MS",
    "FleetBook",
    "WorkerRecord",
    "consumers_by_queue",
    "unconsumed_queues",
]

WORKER_RENEW_S = 5.0
"""Seconds between two renewals of a worker's record."""
WORKER_SILENCE_MS = 15_000
"""A worker whose record was not renewed for this long is offline (three renewals missed)."""
WORKER_HISTORY_MS = 86_400_000
"""How long an offline worker's last record is kept (a day)."""
WORKER_RECORDS_KEPT = 500
"""Most worker records kept: the most recently renewed."""


class WorkerRecord(WireModel):
    """What a worker announces of itself (``asyncbook.celery`` renews it)."""

    name: StrictStr
    """Its node name (``celery@host``), as its tasks' info names it."""
    host: StrictStr = ""
    pid: StrictInt = 0
    celery_version: StrictStr = ""
    asyncbook_version: StrictStr = ""
    pool: StrictStr = ""
    """The pool kind: ``prefork``, ``threads``, ``solo``, ``gevent``, ``eventlet``."""
    concurrency: StrictInt = 0
    prefetch: StrictInt = 0
    """Messages it may hold unacknowledged (prefetch multiplier times concurrency)."""
    queues: tuple[StrictStr, ...] = ()
    """The queues it consumes."""
    started_ms: Number = 0
    running: tuple[StrictStr, ...] = ()
    """The task ids it runs (its first 100)."""
    load: tuple[float, ...] = ()
    """The host's load averages (1, 5, 15 minutes), where the OS tells them."""
    renewed_ms: Number = 0
    """When it was last renewed, by the book's clock."""
    stopped_ms: Number | None = None
    """When it shut down gracefully (None: it did not)."""


@runtime_checkable
class FleetBook(Protocol):
    """A book that keeps the workers' records (a ``RedisBook`` of any layout)."""

    def announce_worker(self, record: WorkerRecord) -> int:
        """Write ``record`` (renewed now, by the book's clock); returns that time (ms)."""
        ...

    def retire_worker(self, record: WorkerRecord) -> int:
        """Mark the worker offline at once (a graceful shutdown), keeping ``record``."""
        ...

    def worker_records(self) -> tuple[list[tuple[WorkerRecord, bool]], int]:
        """Every record kept, each with whether its worker is online, the most recently
        renewed first; and the book's now (ms)."""
        ...


def consumers_by_queue(records: Iterable[tuple[WorkerRecord, bool]]) -> dict[str, int]:
    """How many online workers consume each queue."""
    counts: dict[str, int] = {}
    for record, online in records:
        if online:
            for queue in record.queues:
                counts[queue] = counts.get(queue, 0) + 1
    return counts


def unconsumed_queues(ready: Mapping[str, int], consumers: Mapping[str, int]) -> list[str]:
    """The queues with ready messages that no online worker consumes, by name."""
    return sorted(name for name, count in ready.items() if count > 0 and not consumers.get(name))
