"""Publishing a tracked task creates it in the book (``before_task_publish``).

The create is deferred (sent behind ``apply_async`` by ``Creates``) when the book can
(``AsyncBook.create_sender``) and ``asyncbook_defer_creates`` is on; else it is written
before the message is sent. A worker creates the task from its message when the
publisher did not (``create_late``).
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Celery, Task, signals

from .._book import AsyncBook, CreateSpec
from .._console import PublishInfo
from .._limits import TASK_ID_LIMIT
from .._models import AsyncTask, FailEvent
from ._configured import retried
from ._creates import Creates
from ._info import InfoPolicy
from ._keeping import kept_message
from ._recorder import Recorder
from ._retries import retry_reason
from ._settings import Settings
from ._state import Handler, Lazy
from ._tracing import trace_context
from ._tracking import (
    callback_id,
    describe_error,
    expires_ms,
    heartbeat_timeout_ms,
    is_tracked,
    iso_time,
    max_attempts,
    now_ms,
    ttl_ms,
)

__all__ = ["CREATED_HEADER", "DEADLINE_HEADER", "POSTPONED_HEADER", "Publishing"]

logger = logging.getLogger("asyncbook.celery")

CREATED_HEADER = "asyncbook_created"
"""Message header: the publisher created the task in the book."""
DEADLINE_HEADER = "asyncbook_deadline_ms"
"""Message header: the task's deadline, in ms since the epoch."""
POSTPONED_HEADER = "asyncbook_postponed"
"""Message header: how often a delivery held by a live attempt was sent again (one run
per task); such a publish creates nothing and records no retry."""


class Publishing:
    """Creates at publish (and late, from the message, in the worker); it owns the
    deferred creates (``Creates``), built on first use."""

    def __init__(
        self,
        app: Celery,
        settings: Lazy[Settings],
        book: Lazy[AsyncBook],
        recorder: Lazy[Recorder],
        info_policy: Lazy[InfoPolicy],
    ) -> None:
        self.app = app
        self.settings = settings
        self.book = book
        self.recorder = recorder
        self.info_policy = info_policy
        self.creates: Lazy[Creates | None] = Lazy(self._deferred_creates)

    def on_before_task_publish(
        self,
        sender: object = None,
        headers: dict[str, Any] | None = None,
        body: Any = None,
        routing_key: Any = None,
        exchange: Any = None,
        properties: Any = None,
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
        if len(task_id) > TASK_ID_LIMIT:
            # No book takes it (invalid-request, field taskId); a signal cannot stop the
            # publish, so it goes untracked, said once here rather than at every event.
            logger.error(
                "asyncbook: task %s id %r... has %d characters, over the limit of %d "
                "(taskId): it is published untracked, not in the book",
                sender,
                task_id[:64],
                len(task_id),
                TASK_ID_LIMIT,
            )
            return
        if headers.get(POSTPONED_HEADER):
            return  # a held delivery sent again: its task and deadline are the message's
        retries = int(headers.get("retries") or 0)
        if retries > 0:
            self._record_retry(task_id, retries - 1)
            return
        settings = self.settings.get()
        now, ttl = now_ms(), ttl_ms(task, settings.default_ttl_ms)
        given = expires_ms(headers.get("expires"))
        if given is not None and given < now + ttl:
            ttl = max(1, given - now)
        group = headers.get("group")
        group_id = group if isinstance(group, str) else None
        kept = None
        info_policy = self.info_policy.get()
        if settings.keep_messages:  # before asyncbook's own headers are added
            kept = kept_message(
                task,
                headers,
                body,
                exchange,
                routing_key,
                properties,
                settings.keep_message_limit,
                redact=info_policy.redact,
                keep_redacted=task.name in settings.keep_redacted_messages,
            )
        trace = trace_context(headers) if settings.tracing else None  # the send span's
        info = info_policy.publish_info(sender, headers, body, routing_key, kept, trace)
        creates = self.deferred_creates()
        if creates is not None:
            creates.add(self.create_spec(task, task_id, now, ttl, group_id, info))
            deadline: int | float = now + ttl
            created = True
        else:
            stored = self.create(task, task_id, now, ttl, group_id, info)
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
        error = "retry requested" if raised is None else describe_error(raised)
        event = FailEvent(at_ms=now_ms(), error=error, retryable=True)
        self.recorder.get().write((task_id, event, callback_id(task_id, "retry", retries)))

    def deferred_creates(self) -> Creates | None:
        """Where a publish queues its create (a book with a ``create_sender``, and
        ``defer_creates``), or None (created before the message is sent)."""
        return self.creates.get()

    def _deferred_creates(self) -> Creates | None:
        settings, book = self.settings.get(), self.book
        if not settings.defer_creates or book.get().create_sender() is None:
            return None
        return Creates(book.get, retry_for=settings.retry_for, exit_wait=settings.exit_wait)

    def flush_creates(self) -> None:
        """Wait until the creates this process's publishes queued are in the book."""
        creates = self.creates.built()
        if creates is not None:
            creates.flush()

    def close(self) -> None:
        """Send the queued creates (waiting at most ``retry_for``), then stop."""
        creates = self.creates.built()
        if creates is not None:
            creates.close()

    def create_spec(
        self,
        task: Task[Any, Any],
        task_id: str,
        now: int,
        ttl: int,
        group: str | None,
        info: PublishInfo | None = None,
    ) -> CreateSpec:
        """The create of ``task_id``, from its task's options."""
        timeout = heartbeat_timeout_ms(task, self.settings.get().heartbeat_timeout_ms)
        # Only a message that is acknowledged late comes back after its worker died.
        stall = bool(task.acks_late)
        # id, now, ttl, attempts, exist_ok, heartbeat timeout, retry on stall, group, info
        return CreateSpec(task_id, now, ttl, max_attempts(task), True, timeout, stall, group, info)

    def create(
        self,
        task: Task[Any, Any],
        task_id: str,
        now: int,
        ttl: int,
        group: str | None = None,
        info: PublishInfo | None = None,
        *,
        once: bool = False,
    ) -> AsyncTask | None:
        """Create ``task_id`` now, retried while the book is unreachable (tried ``once``:
        not retried); None if not."""
        spec = self.create_spec(task, task_id, now, ttl, group, info)
        book = self.book
        return retried(
            self.settings.get(),
            lambda: book.get().create(**spec._asdict()),
            task_id,
            "creating",
            "created",
            once=once,
        )

    def create_late(
        self, task: Task[Any, Any], task_id: str, request: Any, *, once: bool = False
    ) -> AsyncTask | None:
        """Create ``task_id`` from the message its execution ``request`` came with (tried
        ``once``: not retried while the book is unreachable)."""
        ttl = ttl_ms(task, self.settings.get().default_ttl_ms)
        deadline = request.get(DEADLINE_HEADER)
        if isinstance(deadline, int) and deadline > ttl:
            now = deadline - ttl
        else:  # a publisher without asyncbook: its message's expires still bounds the task
            now = now_ms()
            given = expires_ms(request.get("expires"))
            if given is not None and given < now + ttl:
                ttl = max(1, given - now)
        group = request.group if isinstance(request.group, str) else None
        info = self.info_policy.get().publish_info(
            task.name,
            {"parent_id": request.parent_id, "root_id": request.root_id},
            (request.args, request.kwargs),
            (request.delivery_info or {}).get("routing_key"),
        )
        return self.create(task, task_id, now, ttl, group, info, once=once)

    def handlers(self) -> list[Handler]:
        """Its signal: the publish of a message (client side)."""
        return [(signals.before_task_publish, self.on_before_task_publish)]
