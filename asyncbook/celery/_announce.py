"""A worker announces itself: its record (``asyncbook._fleet.WorkerRecord``), renewed
by a thread of its main process every ``WORKER_RENEW_S`` seconds (never on a task's
write path), and marked offline when the worker shuts down gracefully."""

from __future__ import annotations

import logging
import os
import socket
import time
from typing import Any

import celery
from celery.worker import state as worker_state

from .._book import AsyncBook
from .._fleet import WORKER_RENEW_S, FleetBook, WorkerRecord
from .._version import __version__
from ._upkeep import Every

__all__ = ["Announcer", "record_of"]

logger = logging.getLogger("asyncbook.celery")

RUNNING_ANNOUNCED = 100
"""Most running task ids a record names."""


def _pool_kind(controller: Any) -> str:
    """``prefork``, ``threads``, ``solo``... from the pool class's module."""
    pool = getattr(controller, "pool", None) or getattr(controller, "pool_cls", None)
    module = str(getattr(type(pool) if not isinstance(pool, type) else pool, "__module__", ""))
    kind = module.rsplit(".", 1)[-1]
    return {"thread": "threads", "concurrency": ""}.get(kind, kind)


def record_of(consumer: Any, started_ms: float) -> WorkerRecord:
    """The record of the worker whose consumer (``worker_ready``'s sender) is given."""
    app = consumer.app
    controller = getattr(consumer, "controller", None)
    concurrency = int(getattr(controller, "concurrency", 0) or 0)
    multiplier = int(app.conf.worker_prefetch_multiplier or 0)
    running = sorted(str(request.id) for request in list(worker_state.active_requests))
    try:
        load = tuple(round(value, 2) for value in os.getloadavg())
    except OSError:  # not every OS tells it
        load = ()
    return WorkerRecord(
        name=str(getattr(consumer, "hostname", None) or socket.gethostname()),
        host=socket.gethostname(),
        pid=os.getpid(),
        celery_version=celery.__version__,
        asyncbook_version=__version__,
        pool=_pool_kind(controller),
        concurrency=concurrency,
        prefetch=concurrency * multiplier,
        queues=tuple(sorted(app.amqp.queues.consume_from)),
        started_ms=int(started_ms),
        running=tuple(running[:RUNNING_ANNOUNCED]),
        load=load,
    )


class Announcer:
    """Renews one worker's record in a thread; ``stop`` marks it offline at once."""

    def __init__(self, book: AsyncBook, consumer: Any, interval: float = WORKER_RENEW_S) -> None:
        self.book = book
        self.consumer = consumer
        self.started_ms = time.time() * 1000
        self.pid = os.getpid()
        self.thread = Every("asyncbook-worker", interval, self.announce)

    def start(self) -> None:
        """Announce now, then every ``interval`` seconds (a book that keeps no records:
        nothing)."""
        if isinstance(self.book, FleetBook):
            self.thread.start()

    def announce(self) -> None:
        """Renew the record."""
        if isinstance(self.book, FleetBook):
            self.book.announce_worker(record_of(self.consumer, self.started_ms))

    def stop(self) -> None:
        """Stop renewing and mark the worker offline (a failure is only logged: the
        record then lapses after the silence)."""
        self.thread.stop()
        self.thread.join(2.0)
        if isinstance(self.book, FleetBook):
            try:
                self.book.retire_worker(record_of(self.consumer, self.started_ms))
            except Exception as error:
                logger.warning("asyncbook: the worker's record was not retired: %r", error)
