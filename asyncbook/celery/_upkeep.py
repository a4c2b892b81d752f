"""The sweep, delivery and indexer in a worker's main process, and a warning while the
sweep stops.

Every worker (and beat) of an installed app runs them in daemon threads of its main
process, not in the pool: no ``-Q``, route, busy pool or prefetch can hold them up. Each
second the sweep thread asks the book for the namespace's sweep lease (a key set with
``NX PX``, renewed by its holder, lapsing 3 s after the holder stopped), so one process
of all those sharing a namespace sweeps at a time; the delivery thread reads the outbox
through its consumer group, which shares the entries out among the processes. A health
check once a minute logs a WARNING while tasks are overdue and no sweep ran for 30 s
(every process warns, swept or not).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Protocol

from .._book import AsyncBook
from .._console import IndexedBook
from .._health import sweep_health
from .._sweep import SweepLease

__all__ = ["Every", "Upkeep", "Upkept"]

logger = logging.getLogger("asyncbook.celery")

SWEEP_INTERVAL = 1.0
"""Seconds between two sweeps (and two delivery passes) of a process."""
WARN_INTERVAL = 60.0
"""Seconds between two health checks (and so between two warnings)."""


class Every:
    """Calls ``action`` every ``interval`` seconds in a daemon thread, until stopped.

    A failure is logged (a WARNING the first time, then DEBUG until it works again) and
    the next round comes as usual; a round that overran is not made up with a burst.
    """

    def __init__(
        self, name: str, interval: float, action: Callable[[], object], first: float = 0.0
    ) -> None:
        self.name = name
        self.interval = interval
        self.action = action
        self.first = first
        self.rounds = 0
        """Rounds run (for tests)."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread (the first round after ``first`` seconds)."""
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop after the current round."""
        self._stop.set()

    def join(self, timeout: float | None = None) -> None:
        """Wait for the thread to end (after ``stop``)."""
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        failing = False
        due = time.monotonic() + self.first
        while not self._stop.wait(max(0.0, due - time.monotonic())):
            try:
                self.action()
            except Exception as error:
                level = logging.DEBUG if failing else logging.WARNING
                logger.log(level, "asyncbook: %s failed (tried again): %r", self.name, error)
                failing = True
            else:
                failing = False
            self.rounds += 1
            due = max(due + self.interval, time.monotonic())


class Upkept(Protocol):
    """What the threads keep up: its book, its sweep and its delivery (the worker's
    ``Service``, or the integration)."""

    @property
    def book(self) -> AsyncBook:
        """The book swept."""
        ...

    def sweep(self) -> object:
        """Expire every task whose deadline has passed."""
        ...

    def deliver(self, consumer: str | None = None) -> object:
        """Hand pending notifications to the sinks."""
        ...


class Upkeep:
    """The threads of one process: sweep (under the lease), deliver, check health.

    With ``sweep=False`` (``asyncbook_worker_sweep = False``) only the health check runs.
    """

    def __init__(
        self,
        integration: Upkept,
        hostname: str,
        *,
        sweep: bool = True,
        interval: float = SWEEP_INTERVAL,
        warn_interval: float = WARN_INTERVAL,
        orphans: Callable[[], object] | None = None,
        orphan_interval: float = 3600.0,
    ) -> None:
        self.integration = integration
        self.hostname = hostname
        """The consumer name delivery reads the outbox as (the worker's node name)."""
        self.pid = os.getpid()
        self.owner = f"{hostname}:{self.pid}"
        """Who holds the sweep lease, when this process does."""
        self.lease_ms = max(1, int(interval * 3000))
        self.sweeps = 0
        """Sweeps this process ran (it held the lease)."""
        self.threads = [Every("asyncbook-health", warn_interval, self.check, first=warn_interval)]
        if sweep:
            self.threads += [
                Every("asyncbook-sweep", interval, self.sweep),
                Every("asyncbook-deliver", interval, self.deliver),
            ]
            if isinstance(integration.book, IndexedBook):
                self.threads.append(Every("asyncbook-index", interval / 4, self.index))
        self.orphans = orphans
        """Deletes the artifacts no record names (``asyncbook_artifacts``), under the lease."""
        if sweep and orphans is not None:
            every = orphan_interval
            self.threads.append(Every("asyncbook-artifacts", every, self.sweep_orphans, every))

    def start(self) -> None:
        """Start every thread."""
        for thread in self.threads:
            thread.start()

    def stop(self) -> None:
        """Stop every thread (each ends after its current round)."""
        for thread in self.threads:
            thread.stop()

    def sweep(self) -> None:
        """Sweep, if this process holds the namespace's lease for this second."""
        book = self.integration.book
        if isinstance(book, SweepLease) and not book.claim_sweep(self.owner, self.lease_ms):
            return
        self.integration.sweep()
        self.sweeps += 1

    def sweep_orphans(self) -> None:
        """Delete orphaned artifacts, if this process holds the namespace's sweep lease."""
        book = self.integration.book
        if self.orphans is None:
            return
        if isinstance(book, SweepLease) and not book.claim_sweep(self.owner, self.lease_ms):
            return
        self.orphans()

    def index(self) -> None:
        """Build the console's indexes from the writes' changes (every process may: two
        indexers never apply a change twice)."""
        book = self.integration.book
        if isinstance(book, IndexedBook):
            book.catch_up_index()

    def deliver(self) -> None:
        """Hand pending notifications to the sinks (nothing to do without sinks)."""
        self.integration.deliver(consumer=self.hostname)

    def check(self) -> None:
        """Warn while tasks are overdue and no sweep ran for 30 s."""
        problem = sweep_health(self.integration.book).problem()
        if problem is not None:
            logger.warning(
                "asyncbook: the expiry sweep has stopped: %s. Is a worker or beat of an "
                "app that calls install() running, with asyncbook_worker_sweep on? "
                "`asyncbook doctor` checks the deployment",
                problem,
            )
