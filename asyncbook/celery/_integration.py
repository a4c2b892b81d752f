"""``install(app)``: Celery signals of tracked tasks become book events.

| Celery | book |
|---|---|
| publish (client side) | create if absent, deadline = now + ttl; message ``expires`` = deadline |
| ``task_prerun`` | start (worker = hostname), buffered |
| ``report_progress`` | progress, buffered |
| ``task_success`` | succeed (resultRef, resultHash), in the book before the ack |
| ``task_retry`` | fail, retryable (written before the retry is republished) |
| ``task_failure`` | fail, not retryable |
| ``task_revoked`` | expire when expired, else fail "revoked" |

Every event carries a callback id from the task id, the signal and ``request.retries``,
so a redelivered message changes nothing twice.
"""

from __future__ import annotations

import logging
import socket
import sys
import threading
import weakref
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from celery import Celery, Task, signals

from .._book import AsyncBook
from .._delivery import (
    DeliveryReport,
    NotificationSource,
    deliver_notifications,
    notification_source,
)
from .._dotted import import_path
from .._models import AsyncTask, FailEvent, ProgressEvent, StartEvent, SucceedEvent
from .._sinks import Sink, resolve_sink
from .._sweep import SweepReport, sweep
from ..errors import AsyncBookError
from ._recorder import Recorder, retrying
from ._settings import Settings
from ._tracking import callback_id, is_tracked, max_attempts, now_ms, result_hash, ttl_ms

__all__ = [
    "CREATED_HEADER",
    "DEADLINE_HEADER",
    "Integration",
    "default_result_ref",
    "install",
    "installed",
    "uninstall",
]

logger = logging.getLogger("asyncbook.celery")

CREATED_HEADER = "asyncbook_created"
"""Message header: the publisher created the task in the book."""
DEADLINE_HEADER = "asyncbook_deadline_ms"
"""Message header: the task's deadline, in ms since the epoch."""

_installed: weakref.WeakKeyDictionary[Celery, Integration] = weakref.WeakKeyDictionary()
_install_lock = threading.Lock()

ResultRef = Callable[[Task[Any, Any], str, Any], str]


def default_result_ref(task: Task[Any, Any], task_id: str, result: Any) -> str:
    """Where Celery keeps the result: the result backend's key for ``task_id``."""
    key_for: Callable[[str], bytes | str] | None = getattr(task.backend, "get_key_for_task", None)
    if key_for is None:
        return f"celery-task-meta-{task_id}"
    key = key_for(task_id)
    return key.decode() if isinstance(key, bytes) else str(key)


def _describe(error: BaseException | None) -> str:
    if error is None:
        return "error"
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class Integration:
    """The handlers ``install`` connected for one Celery app, and their book."""

    def __init__(self, app: Celery, book: AsyncBook | None, settings: Settings) -> None:
        self.app = app
        self.settings = settings
        self._book = book
        self.recorder = Recorder(
            self._make_book, flush_delay=settings.flush_delay, retry_for=settings.retry_for
        )
        configured = settings.result_ref
        self.result_ref: ResultRef = (
            default_result_ref
            if configured is None
            else import_path(configured)
            if isinstance(configured, str)
            else configured
        )
        self.sinks: tuple[Sink, ...] = tuple(resolve_sink(spec) for spec in settings.sinks)
        self._uid = f"asyncbook-{id(self)}"
        self._source: NotificationSource | None = None
        if settings.extra:
            unknown = ", ".join(f"asyncbook_{name}" for name in sorted(settings.extra))
            logger.warning("asyncbook: unknown settings ignored: %s", unknown)

    def _make_book(self) -> AsyncBook:
        if self._book is None:
            from ..redis import RedisBook

            self._book = RedisBook.from_url(
                self.settings.redis_url, namespace=self.settings.namespace
            )
        return self._book

    @property
    def book(self) -> AsyncBook:
        """The book events go to (built from ``asyncbook_redis_url`` on first use)."""
        return self.recorder.book

    # -- connecting -----------------------------------------------------------------

    def _handlers(self) -> list[tuple[Any, Callable[..., None]]]:
        return [
            (signals.before_task_publish, self.on_before_task_publish),
            (signals.task_prerun, self.on_task_prerun),
            (signals.task_success, self.on_task_success),
            (signals.task_retry, self.on_task_retry),
            (signals.task_failure, self.on_task_failure),
            (signals.task_revoked, self.on_task_revoked),
            (signals.worker_process_shutdown, self.on_worker_process_shutdown),
            (signals.worker_shutdown, self.on_worker_shutdown),
        ]

    def connect(self) -> None:
        """Connect the handlers and register ``asyncbook.sweep`` / ``asyncbook.deliver``."""
        for signal, handler in self._handlers():
            signal.connect(handler, weak=False, dispatch_uid=f"{self._uid}-{handler.__name__}")
        # The same module-level callables each time: installing again re-registers nothing.
        self.app.task(name="asyncbook.sweep", bind=True, ignore_result=True, shared=False)(
            _sweep_task
        )
        self.app.task(name="asyncbook.deliver", bind=True, ignore_result=True, shared=False)(
            _deliver_task
        )

    def disconnect(self) -> None:
        """Disconnect the handlers and write what is buffered."""
        for signal, handler in self._handlers():
            signal.disconnect(handler, dispatch_uid=f"{self._uid}-{handler.__name__}")
        self.recorder.close()

    # -- beat tasks -------------------------------------------------------------------

    def sweep(self) -> SweepReport:
        """Expire every task whose deadline has passed (``asyncbook.sweep``)."""
        return sweep(self.book, batch=self.settings.sweep_batch)

    def deliver(self, consumer: str | None = None) -> DeliveryReport:
        """Hand pending notifications to the sinks, at least once (``asyncbook.deliver``)."""
        if not self.sinks:
            return DeliveryReport()
        if self._source is None:
            self._source = notification_source(self.book)
        return deliver_notifications(
            self._source,
            self.sinks,
            group=self.settings.consumer_group,
            consumer=consumer or socket.gethostname(),
        )

    # -- handlers ---------------------------------------------------------------------

    def _mine(self, task: object) -> bool:
        return isinstance(task, Task) and task.app is self.app and is_tracked(task)

    def on_before_task_publish(
        self, sender: object = None, headers: dict[str, Any] | None = None, **_: Any
    ) -> None:
        """Publish: create the task (not on a retry) and bound the message by its deadline."""
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
        stored = self._create(task, task_id, now, ttl)
        deadline = now + ttl if stored is None else stored.expires_at_ms
        headers[CREATED_HEADER] = stored is not None
        headers[DEADLINE_HEADER] = deadline
        expires = datetime.fromtimestamp(deadline / 1000, tz=UTC)
        given = headers.get("expires")
        if isinstance(given, str):
            earlier = datetime.fromisoformat(given)
            if earlier.tzinfo is not None and earlier < expires:
                expires = earlier
        headers["expires"] = expires.isoformat()

    def _record_retry(self, task_id: str, retries: int) -> None:
        # Task.retry republishes before task_retry fires: record the failed attempt
        # first, or the next attempt could start before this one is closed.
        current = self.app.current_worker_task
        if current is None or current.request.id != task_id:
            return
        raised = sys.exc_info()[1]
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
        if retries == 0 and not request.get(CREATED_HEADER):
            self._create_late(task, task_id, request.get(DEADLINE_HEADER))
        worker = str(request.hostname or socket.gethostname())
        start = StartEvent(at_ms=now_ms(), worker=worker)
        self.recorder.buffer((task_id, start, callback_id(task_id, "start", retries)))

    def _create_late(self, task: Task[Any, Any], task_id: str, deadline: Any) -> None:
        ttl = ttl_ms(task, self.settings.default_ttl_ms)
        now = deadline - ttl if isinstance(deadline, int) and deadline > ttl else now_ms()
        self._create(task, task_id, now, ttl)

    def _create(self, task: Task[Any, Any], task_id: str, now: int, ttl: int) -> AsyncTask | None:
        try:
            return retrying(
                lambda: self.book.create(
                    id=task_id,
                    now_ms=now,
                    ttl_ms=ttl,
                    max_attempts=max_attempts(task),
                    exist_ok=True,
                ),
                self.settings.retry_for,
                f"creating task {task_id}",
            )
        except AsyncBookError as error:
            logger.error("asyncbook: task %s could not be created: %s", task_id, error)
            return None

    def progress(self, task: Task[Any, Any], percent: int, cursor: str) -> None:
        """Record progress of the running attempt of ``task`` (buffered)."""
        request = task.request
        if request.id is None:
            return
        retries = int(request.retries or 0)
        event = ProgressEvent(at_ms=now_ms(), progress=percent, cursor=cursor)
        callback = callback_id(request.id, "progress", retries, percent)
        self.recorder.buffer((request.id, event, callback))

    def on_task_success(self, sender: object = None, result: Any = None, **_: Any) -> None:
        """The attempt returned: succeed (with acks_late, written before the ack)."""
        if not self._mine(sender):
            return
        assert isinstance(sender, Task)
        request = sender.request
        task_id = request.id
        if task_id is None:
            return
        event = SucceedEvent(
            at_ms=now_ms(),
            result_ref=self.result_ref(sender, task_id, result),
            result_hash=result_hash(result),
        )
        callback = callback_id(task_id, "success", int(request.retries or 0))
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
        **_: Any,
    ) -> None:
        """The attempt raised (retries exhausted included): fail, not retryable."""
        if task_id is None or not self._mine(sender):
            return
        assert isinstance(sender, Task)
        request = sender.request
        # In the worker's main process (a lost pool child) there is no request context.
        retries: int | str = int(request.retries or 0) if request.id == task_id else "lost"
        event = FailEvent(at_ms=now_ms(), error=_describe(exception), retryable=False)
        self._finish(sender, task_id, event, callback_id(task_id, "failure", retries))

    def on_task_revoked(
        self, sender: object = None, request: Any = None, expired: bool = False, **_: Any
    ) -> None:
        """Revoked: expire if the message expired, else fail "revoked"."""
        if request is None or not self._mine(sender):
            return
        task_id = str(request.id)
        if expired:
            try:
                retrying(
                    lambda: self.book.expire(task_id),
                    self.settings.retry_for,
                    f"expiring task {task_id}",
                )
            except AsyncBookError as error:
                logger.error("asyncbook: task %s could not be expired: %s", task_id, error)
            return
        retries = int(getattr(request, "retries", 0) or 0)
        event = FailEvent(at_ms=now_ms(), error="revoked", retryable=False)
        self._write(task_id, event, callback_id(task_id, "revoked", retries))

    def on_worker_process_shutdown(self, **_: Any) -> None:
        """A pool process exits: write what is buffered."""
        self.recorder.flush()

    def on_worker_shutdown(self, **_: Any) -> None:
        """The worker stops: write what is buffered."""
        self.recorder.flush()

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


def _sweep_task(task: Task[Any, Any]) -> int:
    """``asyncbook.sweep``: expire every task whose deadline has passed."""
    current = installed(task.app)
    return 0 if current is None else current.sweep().expired


def _deliver_task(task: Task[Any, Any]) -> int:
    """``asyncbook.deliver``: hand pending notifications to the configured sinks."""
    current = installed(task.app)
    return 0 if current is None else current.deliver().delivered


def install(app: Celery, book: AsyncBook | None = None) -> Integration:
    """Connect asyncbook's signal handlers for ``app``, once; returns the integration.

    ``book`` defaults to a ``RedisBook`` on ``asyncbook_redis_url`` (the broker URL when
    the broker is Redis), built on first use. Installing again with another book
    replaces the previous integration.
    """
    with _install_lock:
        current = _installed.get(app)
        if current is not None:
            if book is None or book is current._book:
                return current
            current.disconnect()
        integration = Integration(app, book, Settings.from_conf(app.conf))
        integration.connect()
        _installed[app] = integration
        return integration


def uninstall(app: Celery) -> None:
    """Disconnect what ``install`` connected for ``app`` (tests, reconfiguration)."""
    with _install_lock:
        current = _installed.pop(app, None)
    if current is not None:
        current.disconnect()


def installed(app: Celery) -> Integration | None:
    """The integration installed for ``app``, if any."""
    return _installed.get(app)
