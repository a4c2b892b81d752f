"""``install(app)``: Celery signals of tracked tasks become book events.

| Celery | book |
|---|---|
| publish (client side) | create if absent (deferred), deadline = now + ttl or ``expires`` |
| ``task_prerun`` | start (worker = hostname), buffered (claimed now: ``_one_run``) |
| ``report_progress`` | progress, buffered |
| ``task_success`` | succeed (resultRef, resultHash), in the book before the ack |
| ``task_retry`` | fail, retryable (written before the retry is republished) |
| ``task_failure`` | fail, not retryable (once per execution) |
| ``task_revoked`` | expire when expired, else cancel ("revoked" or "terminated") |

Every event carries a callback id from the task id, the signal and ``request.retries``
(start and progress also a nonce of the execution), so a redelivered message changes
nothing twice, and a message run again after a stall starts a new attempt.

The handlers live in the integration's parts, each with one concern: ``Publishing``
(creates), ``Executions`` (prerun to postrun, progress), ``Outcomes`` (the end of each
attempt), ``Controls`` (cancel, the cancels a worker follows, the checkpoint) and
``Service`` (the worker's queue, sweep and delivery). ``Integration`` builds them in the
order they use each other, each given what it uses, and connects and disconnects their
handlers in one place; ``install`` and ``uninstall`` (``_registry``) build it and register
it for the app. The settings, and what is made from them (the book, the recorder, the
sinks, the ``asyncbook_result_ref`` callable), are each one ``Lazy``, built when first
needed.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from typing import Any

from celery import Celery, Task, signals

from .._book import AsyncBook
from .._delivery import DeliveryReport
from .._models import AsyncTransition
from .._output import OutputAppend
from .._sinks import GroupSink, Sink
from .._sweep import SweepReport
from . import _configured
from ._beat import BeatRouter, add_schedule, is_configured, listed_routes, remove_schedule
from ._cancels import Controls
from ._concurrency import Limits
from ._execution import Executions
from ._info import InfoPolicy
from ._late import flush_all
from ._lifecycle import Heartbeats
from ._one_run import OneRun
from ._outcomes import Outcomes
from ._publishing import CREATED_HEADER, DEADLINE_HEADER, Publishing
from ._recorder import Recorder
from ._result_ref import ResultRef
from ._revoke import install_control, uninstall_control
from ._settings import Settings
from ._startup import SettingsGate, StartChecks
from ._state import Handler, Lazy, Running
from ._trace_ends import TraceEnds
from ._tracing import Tracing
from ._worker import Delivery, Service

__all__ = ["CREATED_HEADER", "DEADLINE_HEADER", "BeatTask", "Integration"]

BeatTask = Callable[["Task[Any, Any]"], int]
"""``asyncbook.sweep`` or ``asyncbook.deliver``: the same module-level callable each time."""


class Integration:
    """The handlers ``install`` connected for one Celery app, and their book.

    The handlers (``on_<signal>``) are its parts': ``publishing``, ``executions``,
    ``outcomes``, ``controls``, ``service`` and ``startup``.
    """

    def __init__(
        self, app: Celery, book: AsyncBook | None = None, settings: Settings | None = None
    ) -> None:
        self.app = app
        self.given_book = book
        """The book given to ``install`` (None: built from the settings)."""
        # Built in the order they use each other. The settings (an app may be configured
        # after install), and what is made from them, are each built on first use.
        conf = (
            Lazy(lambda: _configured.read_settings(app, book))
            if settings is None
            else Lazy.ready(settings)
        )
        books: Lazy[AsyncBook] = (
            Lazy(lambda: _configured.build_book(app, conf.get()))
            if book is None
            else Lazy.ready(book)
        )
        self.running = running = Running()
        recorder = Lazy(lambda: _configured.recorder(conf.get(), books.get, running))
        info = Lazy(lambda: _configured.info_policy(conf.get()))
        result_ref = Lazy(lambda: _configured.result_ref(conf.get()))
        self._settings, self._book, self._recorder = conf, books, recorder
        self._info_policy, self._result_ref = info, result_ref
        self.publishing = publishing = Publishing(app, conf, books, recorder, info)
        self.one_run = one_run = OneRun(app, conf, books)
        self.limits = limits = Limits(app, conf, books)
        self.executions = Executions(
            app, conf, books, recorder, running, publishing, one_run, limits
        )
        self.outcomes = Outcomes(app, conf, books, recorder, running, info, result_ref)
        self.controls = Controls(app, books, recorder, running, publishing.flush_creates)
        self.tracing = Tracing(app, conf, books)
        self.delivery = delivery = Delivery(conf, books, TraceEnds(conf, books, self.tracing))
        self.service = Service(app, conf, books, recorder, running, self.controls, delivery)
        self.startup = StartChecks(app, conf, result_ref, delivery.sinks, delivery.group_sinks)
        # The router stays in app.conf after uninstall: it holds no integration.
        held = weakref.ref(conf)
        self.router = BeatRouter(lambda: None if (s := held()) is None else s.get().queue)
        self.schedule: dict[str, dict[str, Any]] = {}
        """The beat entries ``install`` added (removed again by ``disconnect``)."""
        self._uid = f"asyncbook-{id(self)}"

    # -- what the parts built, read when first needed ----------------------------------

    @property
    def settings(self) -> Settings:
        """The ``asyncbook_*`` settings of ``app.conf``, read once, when first needed."""
        return self._settings.get()

    @property
    def recorder(self) -> Recorder:
        """Writes this process's events to the book (built on first use)."""
        return self._recorder.get()

    @property
    def book(self) -> AsyncBook:
        """The book events go to (built from ``asyncbook_redis_url`` on first use)."""
        return self._book.get()

    def built_book(self) -> AsyncBook | None:
        """The book if it was given or built, else None (nothing is built)."""
        return self._book.built()

    @property
    def info_policy(self) -> InfoPolicy:
        """What a publish records for the console (``asyncbook_record_info`` ...)."""
        return self._info_policy.get()

    @property
    def result_ref(self) -> ResultRef:
        """``asyncbook_result_ref`` (imported on first use), else ``default_result_ref``."""
        return self._result_ref.get()

    @property
    def sinks(self) -> tuple[Sink, ...]:
        """``asyncbook_sinks``, resolved (dotted paths imported) on first use."""
        return self.delivery.sinks.get()

    @property
    def group_sinks(self) -> tuple[GroupSink, ...]:
        """``asyncbook_group_sinks``, resolved on first use."""
        return self.delivery.group_sinks.get()

    @property
    def heartbeats(self) -> Heartbeats:
        """This process's running tracked executions, beating every interval."""
        return self.executions.heartbeats()

    # -- what the parts do, for callers outside them ------------------------------------

    def sweep(self) -> SweepReport:
        """Expire every task whose deadline has passed (``asyncbook.sweep``)."""
        return self.service.sweep()

    def deliver(self, consumer: str | None = None) -> DeliveryReport:
        """Hand pending notifications to the sinks, at least once (``asyncbook.deliver``)."""
        return self.service.deliver(consumer)

    def flush_creates(self) -> None:
        """Wait until the creates this process's publishes queued are in the book."""
        self.publishing.flush_creates()

    def progress(
        self, task: Task[Any, Any], percent: int, cursor: str, task_id: str | None = None
    ) -> None:
        """Record progress of the running attempt of ``task`` (buffered)."""
        self.executions.progress(task, percent, cursor, task_id)

    def output(
        self, task: Task[Any, Any], chunks: tuple[str, ...], task_id: str | None = None
    ) -> OutputAppend | None:
        """Append to the output of the running attempt of ``task`` (one script call)."""
        return self.executions.output(task, chunks, task_id)

    def create_missing(self, task_id: str) -> bool:
        """Create ``task_id``, running in this process, from its message; True if it did."""
        return self.executions.create_missing(task_id)

    def backend_wrote(self, task_id: str, signal: str, retries: int) -> None:
        """asyncbook's result backend wrote this execution's ``signal`` event."""
        self.outcomes.backend_wrote(task_id, signal, retries)

    def expire(self, task_id: str) -> AsyncTransition | None:
        """Expire ``task_id`` at its deadline now; None if it could not be."""
        return self.outcomes.expire(task_id)

    # -- connecting -----------------------------------------------------------------

    def _handlers(self) -> list[Handler]:
        return [
            *self.startup.handlers(),  # first: a worker whose settings do not read stops
            # The send span before the create: the book keeps its context (trace ends).
            *self.tracing.publish_handlers(),
            *self.publishing.handlers(),
            *self.executions.handlers(),
            *self.one_run.handlers(),
            *self.limits.handlers(),
            *self.outcomes.handlers(),
            *self.tracing.handlers(),
            *self.controls.handlers(),
            # Before the service's (which flush the recorder): a late answer may hand
            # events back to the recorder.
            (signals.worker_process_shutdown, self.on_shutdown),
            (signals.worker_shutdown, self.on_shutdown),
            *self.service.handlers(),
            (self.app.on_after_configure, self.on_after_configure),
        ]

    def _dispatch_uid(self, handler: Callable[..., Any]) -> str:
        """The handler's id on its signal: one per class and method, so that two parts'
        handlers of one name (``on_worker_init``) are both connected (a signal keeps one
        receiver per id and sender)."""
        return f"{self._uid}-{handler.__module__}.{handler.__qualname__}"

    def connect(self, beat_tasks: Mapping[str, BeatTask]) -> None:
        """Connect the handlers, register the beat tasks (``asyncbook.sweep``,
        ``asyncbook.deliver``) and route them to their queue (once the app is configured)."""
        for signal, handler in self._handlers():
            signal.connect(handler, weak=False, dispatch_uid=self._dispatch_uid(handler))
        # The same module-level callables each time: installing again re-registers nothing.
        for name, beat_task in beat_tasks.items():
            self.app.task(name=name, bind=True, ignore_result=True, shared=False)(beat_task)
        if is_configured(self.app):
            self._add_route(self.app.conf)
        install_control(self.app, self.controls.cancel_revoked)

    def disconnect(self) -> None:
        """Disconnect the handlers, remove the route and write what is buffered."""
        for signal, handler in self._handlers():
            signal.disconnect(handler, dispatch_uid=self._dispatch_uid(handler))
        if is_configured(self.app):
            conf = self.app.conf
            routes = listed_routes(conf.task_routes)
            ours = (self.router, self.startup.gate)
            if any(route is one for route in routes for one in ours):
                conf.task_routes = tuple(r for r in routes if all(r is not one for one in ours))
            remove_schedule(conf, self.schedule)
        uninstall_control(self.app)
        self.service.stop_upkeep()
        self.publishing.close()
        flush_all()
        recorder = self._recorder.built()
        if recorder is not None:
            recorder.close()

    def on_shutdown(self, **_: Any) -> None:
        """The worker (or a pool process) stops: read the result writes not yet answered
        (``_late``)."""
        flush_all()

    def _add_route(self, conf: Any) -> None:
        # After the app's own routes: a route of the user's for the beat tasks wins.
        routes = [
            route
            for route in listed_routes(conf.task_routes)
            if not isinstance(route, BeatRouter | SettingsGate)
        ]
        # The gate first (it routes nothing): a tracked task is not published while the
        # settings do not read, whatever route the app gives it.
        conf.task_routes = (self.startup.gate, *routes, self.router)
        self.schedule = add_schedule(conf)

    def on_after_configure(self, sender: object = None, source: Any = None, **_: Any) -> None:
        """The app read its configuration (again): route the beat tasks to their queue and
        put them on beat's schedule."""
        if sender is self.app and source is not None:
            self._add_route(source)
