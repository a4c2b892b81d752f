"""``install(app)``: Celery signals of tracked tasks become book events.

| Celery | book |
|---|---|
| publish (client side) | create if absent (deferred), deadline = now + ttl or ``expires`` |
| ``task_prerun`` | start (worker = hostname), buffered; created here if not yet |
| ``report_progress`` | progress, buffered |
| ``task_success`` | succeed (resultRef, resultHash), in the book before the ack |
| ``task_retry`` | fail, retryable (written before the retry is republished) |
| ``task_failure`` | fail, not retryable (once per execution) |
| ``task_revoked`` | expire when expired, else cancel ("revoked" or "terminated") |

Every event carries a callback id from the task id, the signal and ``request.retries``
(start and progress also a nonce of the execution), so a redelivered message changes
nothing twice, and a message run again after a stall starts a new attempt.

Settings, sinks and the ``asyncbook_result_ref`` callable are read when first needed,
not at ``install``: an app may be configured after ``install``, and a sink may be defined
further down the module that calls it.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from celery import Celery, Task, signals

from .._book import ApplyItem, AsyncBook, CreateSpec
from .._console import PublishInfo
from .._delivery import (
    DeliveryReport,
    NotificationSource,
    deliver_notifications,
    group_notification_source,
    notification_source,
)
from .._dotted import import_path
from .._health import SILENT_MS
from .._models import (
    AsyncState,
    AsyncTask,
    AsyncTransition,
    CallbackResult,
    CancelEvent,
    FailEvent,
    ProgressEvent,
    StartEvent,
    SucceedEvent,
)
from .._sinks import GroupSink, Sink, resolve_sink
from .._sweep import SweepReport, sweep
from ..errors import AsyncBookError, UnknownTaskError, invalid
from ..redis import EventOutcome, RedisBook, retry_policy
from ._beat import (
    BeatRouter,
    add_schedule,
    deliver_task,
    is_configured,
    listed_routes,
    remove_schedule,
    schedule_in,
    sweep_task,
)
from ._creates import Creates
from ._info import InfoPolicy
from ._lifecycle import CancelledRing, CancelWatch, Heartbeats, TaskCancelled, add_to_revoked
from ._recorder import Recorder, retrying
from ._registry import _install_lock, _installed
from ._result_ref import ResultRef, default_result_ref
from ._retries import retry_reason
from ._revoke import cancelled_here, install_control, uninstall_control
from ._settings import Settings
from ._tracking import (
    callback_id,
    expires_ms,
    heartbeat_timeout_ms,
    is_tracked,
    iso_time,
    max_attempts,
    now_ms,
    result_hash,
    ttl_ms,
)
from ._upkeep import Upkeep
from ._urls import sentinel_book_url

__all__ = [
    "CREATED_HEADER",
    "DEADLINE_HEADER",
    "Integration",
    "install",
    "uninstall",
]

logger = logging.getLogger("asyncbook.celery")

CREATED_HEADER = "asyncbook_created"
"""Message header: the publisher created the task in the book."""
DEADLINE_HEADER = "asyncbook_deadline_ms"
"""Message header: the task's deadline, in ms since the epoch."""

_REMEMBERED_FAILURES = 4096


def _describe(error: BaseException | None) -> str:
    if error is None:
        return "error"
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class Integration:
    """The handlers ``install`` connected for one Celery app, and their book."""

    def __init__(
        self, app: Celery, book: AsyncBook | None = None, settings: Settings | None = None
    ) -> None:
        self.app = app
        self._book = book
        self._settings = settings
        self._recorder: Recorder | None = None
        self._creates: Creates | None = None
        self._result_ref: ResultRef | None = None
        self._info_policy: InfoPolicy | None = None
        self._sinks: tuple[Sink, ...] | None = None
        self._group_sinks: tuple[GroupSink, ...] | None = None
        self._uid = f"asyncbook-{id(self)}"
        self._sources: tuple[NotificationSource, NotificationSource] | None = None
        self._router = BeatRouter(app)
        self._schedule: dict[str, dict[str, Any]] = {}
        """The beat entries ``install`` added (removed again by ``disconnect``)."""
        self._upkeep: Upkeep | None = None
        # Shared with the pool processes forked after worker_init: not reset in them.
        self._ring: CancelledRing | None = None
        self._reset_process_state()

    def _reset_process_state(self) -> None:
        self._pid = os.getpid()
        self._lazy = threading.RLock()
        self._state_lock = threading.Lock()
        # Executions of tracked tasks running in this process, by task name (prerun to
        # postrun): report_progress from a thread of the task's own finds its execution.
        self._running: dict[str, list[tuple[str, int]]] = {}
        self._failures: OrderedDict[str, int | str] = OrderedDict()
        # task id -> (nonce, deadline, create) per running execution: a nonce in its start
        # and progress callback ids (a redelivered execution, after a stall, starts a new
        # attempt instead of repeating the old one), its task's deadline when known, and
        # how to create the task from its message.
        self._executions: dict[str, tuple[str, int | None, Callable[[], object]]] = {}
        # Tasks the book answered "cancelled" for: their next report_progress raises.
        self._cancelled: OrderedDict[str, str | None] = OrderedDict()
        self._heartbeats: Heartbeats | None = None
        self._cancel_watch: CancelWatch | None = None

    def _check_fork(self) -> None:
        # A forked pool child may inherit a lock another thread held at the fork.
        if os.getpid() != self._pid:
            self._reset_process_state()

    # -- what is read when first needed ------------------------------------------------

    def _once(self, attribute: str, build: Callable[[], Any]) -> Any:
        value = getattr(self, attribute)
        if value is None:
            self._check_fork()
            with self._lazy:
                value = getattr(self, attribute)
                if value is None:
                    value = build()
                    setattr(self, attribute, value)
        return value

    def _read_settings(self) -> Settings:
        settings = Settings.from_conf(self.app.conf)
        if settings.extra:
            unknown = ", ".join(f"asyncbook_{name}" for name in sorted(settings.extra))
            logger.warning("asyncbook: unknown settings ignored: %s", unknown)
        return settings

    @property
    def settings(self) -> Settings:
        """The ``asyncbook_*`` settings of ``app.conf``, read once, when first needed."""
        settings: Settings = self._once("_settings", self._read_settings)
        return settings

    @property
    def recorder(self) -> Recorder:
        """Writes this process's events to the book (built on first use)."""
        recorder: Recorder = self._once(
            "_recorder",
            lambda: Recorder(
                self._make_book,
                flush_delay=self.settings.flush_delay,
                retry_for=self.settings.retry_for,
                on_answer=self._note_answer,
                on_unknown=self._create_unknown,
            ),
        )
        return recorder

    @property
    def info_policy(self) -> InfoPolicy:
        """What a publish records for the console (``asyncbook_record_info`` ...)."""

        def build() -> InfoPolicy:
            settings = self.settings
            return InfoPolicy(
                record_info=settings.record_info,
                record_args=settings.record_args,
                limit=settings.info_limit,
                redact=settings.redact,
            )

        policy: InfoPolicy = self._once("_info_policy", build)
        return policy

    @property
    def result_ref(self) -> ResultRef:
        """``asyncbook_result_ref`` (imported on first use), else ``default_result_ref``."""

        def build() -> ResultRef:
            configured = self.settings.result_ref
            if configured is None:
                return default_result_ref
            resolved: ResultRef = (
                import_path(configured) if isinstance(configured, str) else configured
            )
            return resolved

        result_ref: ResultRef = self._once("_result_ref", build)
        return result_ref

    @property
    def sinks(self) -> tuple[Sink, ...]:
        """``asyncbook_sinks``, resolved (dotted paths imported) on first use."""
        sinks: tuple[Sink, ...] = self._once(
            "_sinks", lambda: tuple(resolve_sink(spec) for spec in self.settings.sinks)
        )
        return sinks

    @property
    def group_sinks(self) -> tuple[GroupSink, ...]:
        """``asyncbook_group_sinks``, resolved on first use."""
        sinks: tuple[GroupSink, ...] = self._once(
            "_group_sinks",
            lambda: tuple(resolve_sink(spec) for spec in self.settings.group_sinks),
        )
        return sinks

    def _book_url(self) -> str:
        """``asyncbook_redis_url``; unset, with asyncbook's result backend, the backend's
        Redis (so its one write holds both the book's events and Celery's meta)."""
        conf = self.app.conf
        backend = conf.get("result_backend")
        if not conf.get("asyncbook_redis_url") and isinstance(backend, str):
            scheme, plus, rest = backend.partition("+")
            if plus and scheme == "asyncbook" and rest.startswith(("redis://", "rediss://")):
                return rest
            options = conf.get("result_backend_transport_options") or {}
            master = options.get("master_name") if isinstance(options, dict) else None
            if plus and scheme == "asyncbook" and rest.startswith("sentinel://") and master:
                return sentinel_book_url(rest, str(master))
        return self.settings.redis_url

    def _make_book(self) -> AsyncBook:
        if self._book is None:
            # One call blocks at most _attempt_timeout (connect, then read): the recorder
            # and ``retrying`` do the retrying, within asyncbook_retry_for.
            timeout = self._attempt_timeout
            self._book = RedisBook.from_url(
                self._book_url(),
                namespace=self.settings.namespace,
                socket_timeout=timeout,
                socket_connect_timeout=timeout,
                retry=retry_policy(0),
            )
        return self._book

    @property
    def _attempt_timeout(self) -> float:
        return max(0.05, min(2.0, self.settings.retry_for / 4))

    @property
    def heartbeats(self) -> Heartbeats:
        """This process's running tracked executions, beating every interval."""
        self._check_fork()
        if self._heartbeats is None:
            self._heartbeats = Heartbeats(lambda: self.book, self.settings.heartbeat_interval)
        return self._heartbeats

    def _note_answer(self, item: ApplyItem, result: Any) -> None:
        """The book's answer to an event this process sent: learn of a cancel."""
        task_id = item[0]
        if isinstance(result, CallbackResult):
            state, error = result.task.state.value, result.task.error
        elif isinstance(result, EventOutcome):
            state, error = result.state, result.error
        else:
            return
        if state == AsyncState.CANCELLED.value:
            with self._state_lock:
                self._cancelled[task_id] = error
                while len(self._cancelled) > _REMEMBERED_FAILURES:
                    self._cancelled.popitem(last=False)

    @property
    def book(self) -> AsyncBook:
        """The book events go to (built from ``asyncbook_redis_url`` on first use)."""
        return self.recorder.book

    # -- connecting -----------------------------------------------------------------

    def _handlers(self) -> list[tuple[Any, Callable[..., None]]]:
        return [
            (signals.before_task_publish, self.on_before_task_publish),
            (signals.task_prerun, self.on_task_prerun),
            (signals.task_postrun, self.on_task_postrun),
            (signals.task_success, self.on_task_success),
            (signals.task_retry, self.on_task_retry),
            (signals.task_failure, self.on_task_failure),
            (signals.task_revoked, self.on_task_revoked),
            (signals.celeryd_init, self.on_celeryd_init),
            (signals.worker_init, self.on_worker_init),
            (signals.worker_ready, self.on_worker_ready),
            (signals.worker_process_shutdown, self.on_worker_process_shutdown),
            (signals.worker_shutdown, self.on_worker_shutdown),
            (signals.beat_init, self.on_beat_init),
            (self.app.on_after_configure, self.on_after_configure),
        ]

    def connect(self) -> None:
        """Connect the handlers, register ``asyncbook.sweep`` / ``asyncbook.deliver`` and
        route them to their queue (once the app is configured)."""
        for signal, handler in self._handlers():
            signal.connect(handler, weak=False, dispatch_uid=f"{self._uid}-{handler.__name__}")
        # The same module-level callables each time: installing again re-registers nothing.
        self.app.task(name="asyncbook.sweep", bind=True, ignore_result=True, shared=False)(
            sweep_task
        )
        self.app.task(name="asyncbook.deliver", bind=True, ignore_result=True, shared=False)(
            deliver_task
        )
        if is_configured(self.app):
            self._add_route(self.app.conf)
        install_control(self.app)

    def disconnect(self) -> None:
        """Disconnect the handlers, remove the route and write what is buffered."""
        for signal, handler in self._handlers():
            signal.disconnect(handler, dispatch_uid=f"{self._uid}-{handler.__name__}")
        if is_configured(self.app):
            conf = self.app.conf
            routes = listed_routes(conf.task_routes)
            if any(route is self._router for route in routes):
                conf.task_routes = tuple(route for route in routes if route is not self._router)
            remove_schedule(conf, self._schedule)
        uninstall_control(self.app)
        self._stop_upkeep()
        if self._creates is not None:
            self._creates.close()
        if self._recorder is not None:
            self._recorder.close()

    def _add_route(self, conf: Any) -> None:
        # After the app's own routes: a route of the user's for the beat tasks wins.
        routes = [
            route for route in listed_routes(conf.task_routes) if not isinstance(route, BeatRouter)
        ]
        conf.task_routes = (*routes, self._router)
        self._schedule = add_schedule(conf)

    def on_after_configure(self, sender: object = None, source: Any = None, **_: Any) -> None:
        """The app read its configuration (again): route the beat tasks to their queue and
        put them on beat's schedule."""
        if sender is self.app and source is not None:
            self._add_route(source)

    # -- beat tasks -------------------------------------------------------------------

    def sweep(self) -> SweepReport:
        """Expire every task whose deadline has passed (``asyncbook.sweep``)."""
        return sweep(self.book, batch=self.settings.sweep_batch)

    def deliver(self, consumer: str | None = None) -> DeliveryReport:
        """Hand pending notifications to the sinks, at least once (``asyncbook.deliver``)."""
        if self._sources is None:
            self._sources = (
                notification_source(self.book),
                group_notification_source(self.book),
            )
        delivered = failed = 0
        sinks: tuple[tuple[Any, ...], ...] = (self.sinks, self.group_sinks)
        for source, to in zip(self._sources, sinks, strict=True):
            if not to:
                continue  # nobody to hand them to: they wait in the book
            report = deliver_notifications(
                source,
                to,
                group=self.settings.consumer_group,
                consumer=consumer or socket.gethostname(),
                min_idle_ms=self.settings.redelivery_idle_ms,
            )
            delivered, failed = delivered + report.delivered, failed + report.failed
        return DeliveryReport(delivered=delivered, failed=failed)

    # -- the worker and its queues ------------------------------------------------------

    def on_celeryd_init(self, instance: Any = None, options: Any = None, **_: Any) -> None:
        """A worker starts: without ``-Q`` it consumes the ``asyncbook_queue`` too."""
        if getattr(instance, "app", None) is not self.app or not isinstance(options, dict):
            return
        if options.get("queues"):
            return  # the worker consumes what -Q names; on_worker_ready warns if that's wrong
        queues = self.app.amqp.queues
        name = self.settings.queue
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

    def on_worker_init(self, sender: Any = None, **_: Any) -> None:
        """A worker is made, its pool not yet forked: make the ring of cancelled tasks its
        pool processes will share."""
        if getattr(sender, "app", None) is self.app and self._ring is None:
            self._ring = CancelledRing()

    def _start_upkeep(self, hostname: str) -> None:
        """Sweep, deliver and check health in threads of this process (once per process)."""
        if self._upkeep is None or self._upkeep.pid != os.getpid():
            self._upkeep = Upkeep(self, hostname, sweep=self.settings.worker_sweep)
            self._upkeep.start()

    def _stop_upkeep(self) -> None:
        if self._upkeep is not None and self._upkeep.pid == os.getpid():
            self._upkeep.stop()
        self._upkeep = None

    def on_beat_init(self, sender: Any = None, **_: Any) -> None:
        """Beat starts: its schedule holds the beat tasks, and it sweeps and delivers in
        its own threads too (under the lease)."""
        if getattr(sender, "app", None) is self.app:
            scheduler = getattr(sender, "scheduler", None)
            if scheduler is not None:
                schedule_in(scheduler)
            self._start_upkeep(f"beat@{socket.gethostname()}")

    def on_worker_ready(self, sender: Any = None, **_: Any) -> None:
        """A worker is ready: follow cancels, sweep and deliver in this (main) process.

        With ``asyncbook_worker_sweep`` off, a worker that does not consume the
        ``asyncbook_queue`` says so; loudly when the book shows no sweep ran lately."""
        if getattr(sender, "app", None) is not self.app:
            return
        self._watch_cancels()
        self._start_upkeep(str(getattr(sender, "hostname", None) or socket.gethostname()))
        name = self.settings.queue
        if self.settings.worker_sweep or name in self.app.amqp.queues.consume_from:
            return
        try:
            # One cheap call: a live task well past its deadline means no sweep ran lately.
            late = bool(self.book.overdue(now_ms() - SILENT_MS, 1))
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

    # -- handlers ---------------------------------------------------------------------

    def _mine(self, task: object) -> bool:
        return isinstance(task, Task) and task.app is self.app and is_tracked(task)

    def on_before_task_publish(
        self,
        sender: object = None,
        headers: dict[str, Any] | None = None,
        body: Any = None,
        routing_key: Any = None,
        **_: Any,
    ) -> None:
        """Publish: create the task (not on a retry), deadline = now + ttl or the message's
        earlier ``expires``; the message's ``expires`` is set or made earlier, never later."""
        if headers is None or not isinstance(sender, str):
            return
        task = self.app.tasks.get(sender)
        if task is None or not is_tracked(task):
            return
        task_id = headers.get("id")
        if not isinstance(task_id, str):  # task protocol 1 keeps the id in the body
            return
        retries = int(headers.get("retries") or 0)
        if retries > 0:
            self._record_retry(task_id, retries - 1)
            return
        now, ttl = now_ms(), ttl_ms(task, self.settings.default_ttl_ms)
        given = expires_ms(headers.get("expires"))
        if given is not None and given < now + ttl:
            ttl = max(1, given - now)
        group = headers.get("group")
        group_id = group if isinstance(group, str) else None
        info = self.info_policy.publish_info(sender, headers, body, routing_key)
        creates = self._deferred_creates()
        if creates is not None:
            creates.add(self._create_spec(task, task_id, now, ttl, group_id, info))
            deadline: int | float = now + ttl
            created = True
        else:
            stored = self._create(task, task_id, now, ttl, group_id, info)
            deadline = now + ttl if stored is None else stored.expires_at_ms
            created = stored is not None
        headers[CREATED_HEADER] = created
        headers[DEADLINE_HEADER] = deadline
        if headers.get("expires") is None or (given is not None and deadline < given):
            headers["expires"] = iso_time(deadline)

    def _record_retry(self, task_id: str, retries: int) -> None:
        # Task.retry republishes before task_retry fires: record the failed attempt
        # first, or the next attempt could start before this one is closed.
        current = self.app.current_worker_task
        if current is None or current.request.id != task_id:
            return
        raised = retry_reason()  # what task_retry will carry as its reason's exc
        error = "retry requested" if raised is None else _describe(raised)
        event = FailEvent(at_ms=now_ms(), error=error, retryable=True)
        self.recorder.write((task_id, event, callback_id(task_id, "retry", retries)))

    def on_task_prerun(self, task_id: str | None = None, task: object = None, **_: Any) -> None:
        """A worker starts an attempt: start, buffered (created here if the publisher did not)."""
        if task_id is None or not self._mine(task):
            return
        assert isinstance(task, Task)
        request = task.request
        retries = int(request.retries or 0)
        self._check_fork()
        with self._state_lock:
            self._running.setdefault(task.name, []).append((task_id, retries))
        deadline = request.get(DEADLINE_HEADER)
        create = functools.partial(self._create_late, task, task_id, request)
        if retries == 0 and not request.get(CREATED_HEADER):
            create()
        nonce = uuid.uuid4().hex[:12]
        with self._state_lock:
            self._executions[task_id] = (
                nonce,
                deadline if isinstance(deadline, int) else None,
                create,
            )
        if heartbeat_timeout_ms(task, self.settings.heartbeat_timeout_ms) is not None:
            self.heartbeats.add(task_id)
        worker = str(request.hostname or socket.gethostname())
        start = StartEvent(at_ms=now_ms(), worker=worker)
        self.recorder.buffer(
            (task_id, start, callback_id(task_id, "start", retries, nonce)),
            deadline_ms=self._deadline_of(task_id),
            rides=self._results_ride(),
        )

    def _results_ride(self) -> bool:
        """True when asyncbook's result backend writes an execution's buffered events
        with its result (so they need not be sent before it)."""
        return bool(getattr(self.app.backend, "takes_buffered_events", False))

    def _create_unknown(self, task_id: str) -> bool:
        """The book answered "unknown" to events of ``task_id``: if it runs here (its
        publisher's create had not landed, or was lost), create it from its message."""
        return task_id in self._executions and self.create_missing(task_id)

    def create_missing(self, task_id: str) -> bool:
        """Create ``task_id``, running in this process, from its message (the book did not
        hold it: its publisher's create had not landed, or was lost). True if it did."""
        execution = self._executions.get(task_id)
        return execution is not None and execution[2]() is not None

    def _deadline_of(self, task_id: str) -> int | None:
        execution = self._executions.get(task_id)
        return None if execution is None else execution[1]

    def on_task_postrun(self, task_id: str | None = None, task: object = None, **_: Any) -> None:
        """The attempt is over: it no longer takes progress from other threads."""
        if task_id is None or not self._mine(task):
            return
        assert isinstance(task, Task)
        self._check_fork()
        with self._state_lock:
            running = self._running.get(task.name, [])
            for index, (running_id, _retries) in enumerate(running):
                if running_id == task_id:
                    del running[index]
                    break
            if not running:
                self._running.pop(task.name, None)
            self._executions.pop(task_id, None)
        if self._heartbeats is not None:
            self._heartbeats.discard(task_id)

    def _create_late(self, task: Task[Any, Any], task_id: str, request: Any) -> AsyncTask | None:
        """Create ``task_id`` from the message its execution ``request`` came with."""
        ttl = ttl_ms(task, self.settings.default_ttl_ms)
        deadline = request.get(DEADLINE_HEADER)
        if isinstance(deadline, int) and deadline > ttl:
            now = deadline - ttl
        else:  # a publisher without asyncbook: its message's expires still bounds the task
            now = now_ms()
            given = expires_ms(request.get("expires"))
            if given is not None and given < now + ttl:
                ttl = max(1, given - now)
        group = request.group if isinstance(request.group, str) else None
        info = self.info_policy.publish_info(
            task.name,
            {"parent_id": request.parent_id, "root_id": request.root_id},
            (request.args, request.kwargs),
            (request.delivery_info or {}).get("routing_key"),
        )
        return self._create(task, task_id, now, ttl, group, info)

    def _deferred_creates(self) -> Creates | None:
        """Where a publish queues its create (a RedisBook with ``defer_creates``), or None
        (created before the message is sent)."""
        if not self.settings.defer_creates or not isinstance(self.book, RedisBook):
            return None
        creates: Creates = self._once(
            "_creates",
            lambda: Creates(
                self._redis_book,
                namespace=self._redis_book().namespace,
                retry_for=self.settings.retry_for,
            ),
        )
        return creates

    def _redis_book(self) -> RedisBook:
        book = self.book
        assert isinstance(book, RedisBook)
        return book

    def flush_creates(self) -> None:
        """Wait until the creates this process's publishes queued are in the book."""
        if self._creates is not None:
            self._creates.flush()

    def _create_spec(
        self,
        task: Task[Any, Any],
        task_id: str,
        now: int,
        ttl: int,
        group: str | None,
        info: PublishInfo | None = None,
    ) -> CreateSpec:
        return CreateSpec(
            id=task_id,
            now_ms=now,
            ttl_ms=ttl,
            max_attempts=max_attempts(task),
            exist_ok=True,
            heartbeat_timeout_ms=heartbeat_timeout_ms(task, self.settings.heartbeat_timeout_ms),
            # Only a message that is acknowledged late comes back after its worker died.
            retry_on_stall=bool(task.acks_late),
            group_id=group,
            info=info,
        )

    def _create(
        self,
        task: Task[Any, Any],
        task_id: str,
        now: int,
        ttl: int,
        group: str | None = None,
        info: PublishInfo | None = None,
    ) -> AsyncTask | None:
        spec = self._create_spec(task, task_id, now, ttl, group, info)
        try:
            return retrying(
                lambda: self.book.create(**spec._asdict()),
                self.settings.retry_for,
                f"creating task {task_id}",
                attempt_timeout=2 * self._attempt_timeout,
            )
        except AsyncBookError as error:
            logger.error("asyncbook: task %s could not be created: %s", task_id, error)
            return None

    def _execution(self, task: Task[Any, Any], task_id: str | None) -> tuple[str, int] | None:
        """The execution of ``task`` a progress report is for: the caller's own, else the
        one running in this process (``task_id`` picks one of several)."""
        request = task.request
        if request.id is not None and task_id in (None, request.id):
            return str(request.id), int(request.retries or 0)
        self._check_fork()
        with self._state_lock:
            running = list(self._running.get(task.name, ()))
        if task_id is not None:
            running = [execution for execution in running if execution[0] == task_id]
        if len(running) > 1 and task_id is None:
            raise invalid(
                f"report_progress: {len(running)} executions of {task.name} run in this "
                "process and this thread is none of them; pass task_id=self.request.id "
                "(read in the task's own thread)",
                field="task_id",
            )
        return running[0] if running else None

    def progress(
        self, task: Task[Any, Any], percent: int, cursor: str, task_id: str | None = None
    ) -> None:
        """Record progress of the running attempt of ``task`` (buffered)."""
        execution = self._execution(task, task_id)
        if execution is None:
            return
        running_id, retries = execution
        if running_id in self._cancelled:
            raise TaskCancelled(running_id, self._cancelled[running_id])
        if self._ring is not None and running_id in self._ring:
            # Cancelled in the book since it started: the main process's watch said so.
            raise TaskCancelled(running_id, None)
        own = self._executions.get(running_id)
        nonce = "" if own is None else own[0]
        event = ProgressEvent(at_ms=now_ms(), progress=percent, cursor=cursor)
        callback = callback_id(running_id, "progress", retries, percent, nonce)
        self.recorder.buffer(
            (running_id, event, callback),
            deadline_ms=self._deadline_of(running_id),
            rides=self._results_ride(),
        )

    def last_cursor(self, task: Task[Any, Any]) -> str | None:
        """The cursor the task last reported, in this attempt or an earlier one."""
        task_id = task.request.id
        if task_id is None:
            return None
        self.recorder.flush()
        try:
            return self.book.last_cursor(str(task_id))
        except UnknownTaskError:
            return None

    def cancel(
        self, task_id: str, reason: str | None = None, *, terminate: bool = False
    ) -> CallbackResult:
        """Cancel in the book now, then revoke in Celery (every worker discards it)."""
        self.flush_creates()  # a task this process just published is in the book first
        result = self.book.cancel(task_id, reason)
        with cancelled_here(task_id):  # the revoke's own cancel would only repeat it
            self.app.control.revoke(task_id, terminate=terminate)
        return result

    def on_task_success(self, sender: object = None, result: Any = None, **_: Any) -> None:
        """The attempt returned: succeed (with acks_late, written before the ack)."""
        if not self._mine(sender):
            return
        assert isinstance(sender, Task)
        request = sender.request
        task_id = request.id
        if task_id is None:
            return
        callback = callback_id(task_id, "success", int(request.retries or 0))
        if self.recorder.written(callback):
            return  # asyncbook's result backend wrote it, with Celery's meta
        event = SucceedEvent(
            at_ms=now_ms(),
            result_ref=self.result_ref(sender, task_id, result),
            result_hash=result_hash(result),
        )
        self._finish(sender, task_id, event, callback)

    def on_task_retry(
        self, sender: object = None, request: Any = None, reason: Any = None, **_: Any
    ) -> None:
        """The attempt asked for a retry: fail, retryable (requeued while attempts remain)."""
        if request is None or not self._mine(sender):
            return
        task_id = str(request.id)
        callback = callback_id(task_id, "retry", int(request.retries or 0))
        if self.recorder.written(callback):
            return
        error = _describe(getattr(reason, "exc", None) or reason)
        self._write(task_id, FailEvent(at_ms=now_ms(), error=error, retryable=True), callback)

    def on_task_failure(
        self,
        sender: object = None,
        task_id: str | None = None,
        exception: BaseException | None = None,
        einfo: Any = None,
        **_: Any,
    ) -> None:
        """The attempt raised (retries exhausted included): fail, not retryable."""
        if task_id is None or not self._mine(sender):
            return
        assert isinstance(sender, Task)
        request = sender.request
        # In the worker's main process (a lost pool child) there is no request context.
        retries: int | str = int(request.retries or 0) if request.id == task_id else "lost"
        callback = callback_id(task_id, "failure", retries)
        if self.recorder.written(callback):
            return  # asyncbook's result backend wrote it, with Celery's meta
        if self._failed_before(task_id, retries):
            # A hard time limit sends task_failure twice (once with the request, once
            # from the timeout handler without it): the second is the same failure.
            logger.debug("asyncbook: task %s: the same failure again, ignored", task_id)
            return
        event = FailEvent(at_ms=now_ms(), error=_describe(exception), retryable=False)
        traceback = getattr(einfo, "traceback", None)
        self._finish(
            sender, task_id, self.info_policy.failure_event(event, exception, traceback), callback
        )

    def backend_wrote(self, task_id: str, signal: str, retries: int) -> None:
        """asyncbook's result backend wrote this execution's ``signal`` event (success,
        failure, retry) with Celery's meta: its signal handler writes nothing more."""
        self.recorder.remember(callback_id(task_id, signal, retries))
        if signal == "failure":
            # A hard time limit's second task_failure (without the request) is the same.
            self._failed_before(task_id, retries)

    def _failed_before(self, task_id: str, retries: int | str) -> bool:
        """True if this process already recorded this execution's failure; remembers it."""
        self._check_fork()
        with self._state_lock:
            before = self._failures.get(task_id)
            if before is not None and (before == retries or "lost" in (before, retries)):
                return True
            self._failures[task_id] = retries
            while len(self._failures) > _REMEMBERED_FAILURES:
                self._failures.popitem(last=False)
        return False

    def on_task_revoked(
        self,
        sender: object = None,
        request: Any = None,
        expired: bool = False,
        terminated: bool = False,
        **_: Any,
    ) -> None:
        """Revoked: expire if the message expired, else cancel (queued, between retries,
        or running with ``terminate``)."""
        if request is None or not self._mine(sender):
            return
        task_id = str(request.id)
        retries = int(getattr(request, "retries", 0) or 0)
        if self.recorder.written(callback_id(task_id, "revoked", retries)):
            return  # asyncbook's result backend wrote it, with Celery's meta
        if expired:
            self.expire(task_id)
            return
        event = CancelEvent(at_ms=now_ms(), reason="terminated" if terminated else "revoked")
        self._write(task_id, event, callback_id(task_id, "revoked", retries))

    def expire(self, task_id: str) -> AsyncTransition | None:
        """Expire ``task_id`` at its deadline now (its message expired unrun), retried
        while the book is unreachable; None if it could not be."""
        try:
            return retrying(
                lambda: self.book.expire(task_id),
                self.settings.retry_for,
                f"expiring task {task_id}",
                attempt_timeout=2 * self._attempt_timeout,
            )
        except AsyncBookError as error:
            logger.error("asyncbook: task %s could not be expired: %s", task_id, error)
            return None

    def on_worker_process_shutdown(self, **_: Any) -> None:
        """A pool process exits: write what is buffered."""
        if self._recorder is not None:
            self._recorder.flush()

    def _watch_cancels(self) -> None:
        book = self.book
        if self._cancel_watch is None and isinstance(book, RedisBook):
            if self._ring is None:  # no worker_init (an embedded worker): this process only
                self._ring = CancelledRing()
            self._cancel_watch = CancelWatch(book, self._revoke_cancelled)
            self._cancel_watch.start()

    def _revoke_cancelled(self, task_id: str) -> None:
        """Cancelled in the book: this worker discards its message (Celery's revoked set),
        and a running execution stops at its next ``report_progress`` (the ring)."""
        add_to_revoked(task_id)
        if self._ring is not None:
            self._ring.add(task_id)

    def on_worker_shutdown(self, **_: Any) -> None:
        """The worker stops: stop its threads, write what is buffered."""
        self._stop_upkeep()
        if self._cancel_watch is not None:
            self._cancel_watch.stop()
        if self._heartbeats is not None:
            self._heartbeats.stop()
        if self._recorder is not None:
            self._recorder.flush()

    def _write(self, task_id: str, event: Any, callback: str) -> None:
        self.recorder.write((task_id, event, callback))

    def _finish(self, task: Task[Any, Any], task_id: str, event: Any, callback: str) -> None:
        # acks_late: the message is acknowledged after this handler, so the event must be
        # in the book first. Early ack: the message is gone already; the event rides with
        # the next background flush (within flush_delay), shared with other executions.
        if task.acks_late:
            self._write(task_id, event, callback)
        else:
            self.recorder.buffer((task_id, event, callback))


def install(app: Celery, book: AsyncBook | None = None) -> Integration:
    """Connect asyncbook's signal handlers for ``app``, once; returns the integration.

    ``book`` defaults to a ``RedisBook`` on ``asyncbook_redis_url`` (the broker URL when
    the broker is Redis), built on first use. Settings are read when first needed, so
    the app may be configured before or after. Installing again with another book
    replaces the previous integration.
    """
    with _install_lock:
        current = _installed.get(app)
        if current is not None:
            if book is None or book is current._book:
                return current
            current.disconnect()
        integration = Integration(app, book)
        integration.connect()
        _installed[app] = integration
        return integration


def uninstall(app: Celery) -> None:
    """Disconnect what ``install`` connected for ``app`` (tests, reconfiguration)."""
    with _install_lock:
        current = _installed.pop(app, None)
    if current is not None:
        current.disconnect()
