"""A worker (or beat) of the app: the queue it consumes, and the sweep and delivery its
main process runs (``Upkeep``), started when it is ready and stopped when it shuts down.
``Delivery`` hands the book's notifications to the sinks, resolved on first use.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from celery import Celery, signals

from .._book import AsyncBook
from .._delivery import (
    DeliveryReport,
    NotificationSource,
    deliver_notifications,
    group_notification_source,
    notification_source,
)
from .._health import SILENT_MS
from .._sinks import GroupSink, Sink
from .._sweep import SweepReport, sweep
from . import _configured
from ._announce import Announcer
from ._artifacts import Artifacts
from ._beat import schedule_in
from ._cancels import Controls
from ._recorder import Recorder
from ._settings import Settings
from ._state import Handler, Lazy, Running
from ._trace_ends import TraceEnds
from ._tracking import now_ms
from ._upkeep import Upkeep

__all__ = ["Delivery", "Service"]

logger = logging.getLogger("asyncbook.celery")


class Delivery:
    """The book's notifications, handed to the sinks (each resolved on first use: a sink
    may be defined further down the module that calls ``install``)."""

    def __init__(
        self, settings: Lazy[Settings], book: Lazy[AsyncBook], ends: TraceEnds | None = None
    ) -> None:
        self.settings = settings
        self.ends = ends
        """Records the ends no worker saw in their traces (``asyncbook_tracing``)."""
        self.sinks: Lazy[tuple[Sink, ...]] = Lazy(lambda: _configured.sinks(settings.get()))
        self.group_sinks: Lazy[tuple[GroupSink, ...]] = Lazy(
            lambda: _configured.group_sinks(settings.get())
        )
        self.sources: Lazy[tuple[NotificationSource, NotificationSource]] = Lazy(
            lambda: (notification_source(book.get()), group_notification_source(book.get()))
        )

    def deliver(self, consumer: str | None = None) -> DeliveryReport:
        """Hand pending notifications to the sinks, at least once (``asyncbook.deliver``)."""
        settings = self.settings.get()
        if self.ends is not None and settings.tracing:
            try:
                self.ends.record(consumer or socket.gethostname())
            except Exception as error:  # the sinks' delivery goes on: ends wait in the book
                logger.warning("asyncbook: trace ends not recorded this pass (%s)", error)
        delivered = failed = dropped = 0
        sinks: tuple[tuple[Any, ...], ...] = (self.sinks.get(), self.group_sinks.get())
        for source, to in zip(self.sources.get(), sinks, strict=True):
            if not to:
                continue  # nobody to hand them to: they wait in the book
            report = deliver_notifications(
                source,
                to,
                group=settings.consumer_group,
                consumer=consumer or socket.gethostname(),
                min_idle_ms=settings.redelivery_idle_ms,
            )
            delivered, failed = delivered + report.delivered, failed + report.failed
            dropped += report.dropped
        return DeliveryReport(delivered=delivered, failed=failed, dropped=dropped)


@dataclass(eq=False)
class Service:
    """The app's sweep and delivery, and the worker and beat signals that run them; its
    threads (``Upkeep``) are this process's own."""

    app: Celery
    settings: Lazy[Settings]
    _book: Lazy[AsyncBook]
    recorder: Lazy[Recorder]
    running: Running
    controls: Controls
    delivery: Delivery
    upkeep: Upkeep | None = field(default=None, init=False)
    announcer: Announcer | None = field(default=None, init=False)

    @property
    def book(self) -> AsyncBook:
        """The book swept."""
        return self._book.get()

    def sweep(self) -> SweepReport:
        """Expire every task whose deadline has passed (``asyncbook.sweep``)."""
        return sweep(self._book.get(), batch=self.settings.get().sweep_batch)

    def deliver(self, consumer: str | None = None) -> DeliveryReport:
        """Hand pending notifications to the sinks, at least once (``asyncbook.deliver``)."""
        return self.delivery.deliver(consumer)

    def on_celeryd_init(self, instance: Any = None, options: Any = None, **_: Any) -> None:
        """A worker starts: without ``-Q`` it consumes the ``asyncbook_queue`` too."""
        app = self.app
        if getattr(instance, "app", None) is not app or not isinstance(options, dict):
            return
        if options.get("queues"):
            return  # the worker consumes what -Q names; on_worker_ready warns if that's wrong
        queues = app.amqp.queues
        name = self.settings.get().queue
        try:
            queue = queues[name]  # declared in task_queues, or made as Celery makes one
        except KeyError:
            logger.warning(
                "asyncbook: queue %r is not in task_queues and task_create_missing_queues "
                "is off: this worker will not run asyncbook.sweep or asyncbook.deliver",
                name,
            )
            return
        queues.select_add(queue)

    def start_upkeep(self, hostname: str) -> None:
        """Sweep, deliver and check health in threads of this process (once per process)."""
        if self.upkeep is None or self.upkeep.pid != os.getpid():
            settings = self.settings.get()
            artifacts = Artifacts.of(settings, self) if settings.artifacts.sweep_s else None
            self.upkeep = Upkeep(
                self,
                hostname,
                sweep=settings.worker_sweep,
                orphans=None if artifacts is None else partial(artifacts.sweep, self.book),
                orphan_interval=settings.artifacts.sweep_s or 3600.0,
            )
            self.upkeep.start()

    def stop_upkeep(self) -> None:
        """Stop this process's upkeep threads."""
        if self.upkeep is not None and self.upkeep.pid == os.getpid():
            self.upkeep.stop()
        self.upkeep = None

    def on_beat_init(self, sender: Any = None, **_: Any) -> None:
        """Beat starts: its schedule holds the beat tasks, and it sweeps and delivers in
        its own threads too (under the lease)."""
        if getattr(sender, "app", None) is self.app:
            scheduler = getattr(sender, "scheduler", None)
            if scheduler is not None:
                schedule_in(scheduler)
            self.start_upkeep(f"beat@{socket.gethostname()}")

    def on_worker_ready(self, sender: Any = None, **_: Any) -> None:
        """A worker is ready: follow cancels, sweep and deliver in this (main) process.

        With ``asyncbook_worker_sweep`` off, a worker that does not consume the
        ``asyncbook_queue`` says so; loudly when the book shows no sweep ran lately."""
        if getattr(sender, "app", None) is not self.app:
            return
        self.controls.watch_cancels(getattr(sender, "timer", None))  # sender: the consumer
        self.start_upkeep(str(getattr(sender, "hostname", None) or socket.gethostname()))
        self.announcer = Announcer(self._book.get(), sender)
        self.announcer.start()
        settings = self.settings.get()
        name = settings.queue
        if settings.worker_sweep or name in self.app.amqp.queues.consume_from:
            return
        try:
            # One cheap call: a live task well past its deadline means no sweep ran lately.
            late = bool(self._book.get().overdue(now_ms() - SILENT_MS, 1))
            evidence = f"a task is more than {SILENT_MS // 1000} s past its deadline"
        except Exception as error:  # only a check: the worker runs on
            late, evidence = True, f"the book could not be read ({error!r})"
        if late:
            logger.warning(
                "asyncbook: this worker does not consume queue %r and %s: does any "
                "worker? asyncbook.sweep and asyncbook.deliver run only from that queue "
                "(celery worker -Q <your queues>,%s)",
                name,
                evidence,
                name,
            )
        else:
            logger.info(
                "asyncbook: this worker does not consume queue %r; another worker must "
                "(asyncbook.sweep and asyncbook.deliver run only from it)",
                name,
            )

    def on_worker_process_shutdown(self, **_: Any) -> None:
        """A pool process exits: write what is buffered."""
        recorder = self.recorder.built()
        if recorder is not None:
            recorder.flush()

    def on_worker_shutdown(self, sender: Any = None, **_: Any) -> None:
        """This app's worker stops: stop its threads, write what is buffered. Another
        app's worker in the same process leaves them alone (its stop must not wait for
        this app's book)."""
        if getattr(sender, "app", None) is not self.app:
            return
        if self.announcer is not None and self.announcer.pid == os.getpid():
            self.announcer.stop()
        self.announcer = None
        self.stop_upkeep()
        self.controls.stop_watching()
        process = self.running.process
        if process.heartbeats is not None:
            process.heartbeats.stop()
        self.on_worker_process_shutdown()

    def handlers(self) -> list[Handler]:
        """Its signals: a worker (or beat) starts, is ready, shuts down."""
        by_signal: dict[Any, Callable[..., None]] = {
            signals.celeryd_init: self.on_celeryd_init,
            signals.worker_ready: self.on_worker_ready,
            signals.beat_init: self.on_beat_init,
            signals.worker_process_shutdown: self.on_worker_process_shutdown,
            signals.worker_shutdown: self.on_worker_shutdown,
        }
        return list(by_signal.items())
