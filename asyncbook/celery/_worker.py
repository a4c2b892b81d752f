"""A worker (or beat) of the app: the queue it consumes, and the sweep and delivery its
main process runs (``Upkeep``), started when it is ready and stopped when it shuts down.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable
from typing import Any

from celery import signals

from .._delivery import (
    DeliveryReport,
    deliver_notifications,
    group_notification_source,
    notification_source,
)
from .._health import SILENT_MS
from .._sweep import SweepReport, sweep
from ._beat import schedule_in
from ._cancels import Controls
from ._state import Handler, Shared
from ._tracking import now_ms
from ._upkeep import Upkeep, Upkept

__all__ = ["Service"]

logger = logging.getLogger("asyncbook.celery")


class Service:
    """The app's sweep and delivery, and the worker and beat signals that run them."""

    def __init__(self, state: Shared, controls: Controls, upkept: Upkept) -> None:
        self.state = state
        self.controls = controls
        self.upkept = upkept
        """Whom the threads call (the integration: a test may stand in for its parts)."""

    def sweep(self) -> SweepReport:
        """Expire every task whose deadline has passed (``asyncbook.sweep``)."""
        return sweep(self.state.book, batch=self.state.settings.sweep_batch)

    def deliver(self, consumer: str | None = None) -> DeliveryReport:
        """Hand pending notifications to the sinks, at least once (``asyncbook.deliver``)."""
        state = self.state
        if state.sources is None:
            state.sources = (notification_source(state.book), group_notification_source(state.book))
        delivered = failed = dropped = 0
        sinks: tuple[tuple[Any, ...], ...] = (state.sinks_once.get(), state.group_sinks_once.get())
        for source, to in zip(state.sources, sinks, strict=True):
            if not to:
                continue  # nobody to hand them to: they wait in the book
            report = deliver_notifications(
                source,
                to,
                group=state.settings.consumer_group,
                consumer=consumer or socket.gethostname(),
                min_idle_ms=state.settings.redelivery_idle_ms,
            )
            delivered, failed = delivered + report.delivered, failed + report.failed
            dropped += report.dropped
        return DeliveryReport(delivered=delivered, failed=failed, dropped=dropped)

    def on_celeryd_init(self, instance: Any = None, options: Any = None, **_: Any) -> None:
        """A worker starts: without ``-Q`` it consumes the ``asyncbook_queue`` too."""
        app = self.state.app
        if getattr(instance, "app", None) is not app or not isinstance(options, dict):
            return
        if options.get("queues"):
            return  # the worker consumes what -Q names; on_worker_ready warns if that's wrong
        queues = app.amqp.queues
        name = self.state.settings.queue
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
        state = self.state
        if state.upkeep is None or state.upkeep.pid != os.getpid():
            state.upkeep = Upkeep(self.upkept, hostname, sweep=state.settings.worker_sweep)
            state.upkeep.start()

    def stop_upkeep(self) -> None:
        """Stop this process's upkeep threads."""
        state = self.state
        if state.upkeep is not None and state.upkeep.pid == os.getpid():
            state.upkeep.stop()
        state.upkeep = None

    def on_beat_init(self, sender: Any = None, **_: Any) -> None:
        """Beat starts: its schedule holds the beat tasks, and it sweeps and delivers in
        its own threads too (under the lease)."""
        if getattr(sender, "app", None) is self.state.app:
            scheduler = getattr(sender, "scheduler", None)
            if scheduler is not None:
                schedule_in(scheduler)
            self.start_upkeep(f"beat@{socket.gethostname()}")

    def on_worker_ready(self, sender: Any = None, **_: Any) -> None:
        """A worker is ready: follow cancels, sweep and deliver in this (main) process.

        With ``asyncbook_worker_sweep`` off, a worker that does not consume the
        ``asyncbook_queue`` says so; loudly when the book shows no sweep ran lately."""
        state = self.state
        if getattr(sender, "app", None) is not state.app:
            return
        self.controls.watch_cancels(getattr(sender, "timer", None))  # sender: the consumer
        self.start_upkeep(str(getattr(sender, "hostname", None) or socket.gethostname()))
        name = state.settings.queue
        if state.settings.worker_sweep or name in state.app.amqp.queues.consume_from:
            return
        try:
            # One cheap call: a live task well past its deadline means no sweep ran lately.
            late = bool(state.book.overdue(now_ms() - SILENT_MS, 1))
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
        recorder = self.state.recorder_once.built()
        if recorder is not None:
            recorder.flush()

    def on_worker_shutdown(self, **_: Any) -> None:
        """The worker stops: stop its threads, write what is buffered."""
        self.stop_upkeep()
        process = self.state.process
        if process.cancel_watch is not None:
            process.cancel_watch.stop()
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
