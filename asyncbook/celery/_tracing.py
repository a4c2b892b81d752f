"""Lifecycle traces (``asyncbook_tracing = True``, the ``otel`` extra; docs/tracing.md).

A tracked task's life becomes OpenTelemetry spans in its publisher's trace:

| span | kind | from, to |
|---|---|---|
| ``send <queue>`` | producer | the publish (each retry's too) |
| ``queued <task>`` | internal | the publish to its attempt's start: the queue wait |
| ``process <queue>`` | consumer | one attempt, prerun to postrun |

The send span's context goes with the message (W3C ``traceparent``, through
``opentelemetry.propagate``, so whatever propagator the app set), and the publish time
(``asyncbook_published_ns``); the worker's spans are its children. An attempt's span is
current while it runs: a task it publishes is its child. A retry's send span is a child
of the publisher's context again, so attempts are siblings. An attempt's span records its
retry (event ``asyncbook.retry``) or its task's end (event ``asyncbook.end``, attribute
``asyncbook.state``). An end no attempt records (the sweep's, a cancel through the book, a
revoked message) is a short ``end <task>`` span of its trace with that event: recorded by
the delivery pass from the context the book keeps (``trace_context``, ``stored_end``,
``_trace_ends``), or by the worker that revoked the message when the book keeps none.

Only opentelemetry-api is used, imported when tracing is first needed: the app sets the
tracer provider and exporter up. The messaging attributes follow OpenTelemetry's
semantic conventions, the older names unless ``OTEL_SEMCONV_STABILITY_OPT_IN`` lists
``messaging`` (the newer) or ``messaging/dup`` (both).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from celery import Celery, Task, signals

from .._book import AsyncBook
from .._console import TRACE_LIMIT
from .._trace_store import TraceStore
from .._version import __version__
from ._settings import Settings
from ._state import Handler, Lazy
from ._tracking import describe_error, is_tracked

if TYPE_CHECKING:
    from contextvars import Token

    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer

__all__ = [
    "PUBLISHED_HEADER",
    "TRACE_HEADERS",
    "Tracing",
    "messaging_attributes",
    "trace_context",
]

PUBLISHED_HEADER = "asyncbook_published_ns"
"""Message header: when it was published, in ns since the epoch (the queued span's start)."""
TRACE_HEADERS = ("traceparent", "tracestate", "baggage")
"""The headers the standard propagators write (W3C Trace Context and Baggage)."""

_OLD_OPERATION = {"send": "publish", "receive": "receive", "process": "process"}


def messaging_attributes(operation: str, queue: str | None, message_id: str) -> dict[str, str]:
    """OpenTelemetry's messaging attributes for ``operation`` (send, receive or process),
    named as ``OTEL_SEMCONV_STABILITY_OPT_IN`` asks: ``messaging`` the newer names,
    ``messaging/dup`` both, else the older."""
    opted = {
        part.strip() for part in os.environ.get("OTEL_SEMCONV_STABILITY_OPT_IN", "").split(",")
    }
    attributes = {"messaging.system": "celery", "messaging.message.id": message_id}
    if queue:
        attributes["messaging.destination.name"] = queue
    if "messaging" in opted or "messaging/dup" in opted:
        attributes["messaging.operation.type"] = operation
        attributes["messaging.operation.name"] = operation
    if "messaging" not in opted:
        attributes["messaging.operation"] = _OLD_OPERATION[operation]
    return attributes


def trace_context(headers: Mapping[str, Any]) -> str | None:
    """The W3C trace context a publish injected into ``headers`` as the book keeps it
    (``PublishInfo.trace``): ``traceparent``, then a newline and ``tracestate`` if any,
    the tracestate left out past ``TRACE_LIMIT``; None without a traceparent."""
    traceparent = headers.get("traceparent")
    if not isinstance(traceparent, str) or not traceparent.isascii() or "\n" in traceparent:
        return None
    if len(traceparent) > TRACE_LIMIT:
        return None
    tracestate = headers.get("tracestate")
    if isinstance(tracestate, str) and tracestate and tracestate.isascii():
        both = f"{traceparent}\n{tracestate}"
        if len(both) <= TRACE_LIMIT and both.count("\n") == 1:
            return both
    return traceparent


@dataclass
class _Attempt:
    task_id: str
    parent: Context
    """The publisher's context the message carried: a retry's send span is its child."""
    span: Span
    token: Token[Context]
    ended: bool = False


class _Otel:
    """The opentelemetry-api modules, imported on first use."""

    def __init__(self) -> None:
        from opentelemetry import context, propagate, trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.context, self.propagate, self.trace = context, propagate, trace
        self.w3c = TraceContextTextMapPropagator()
        """Reads a stored trace context (``trace_context``), whatever the app's propagator."""
        self._tracer: tuple[object, Tracer] | None = None

    def tracer(self) -> Tracer:
        """asyncbook's tracer from the global provider (made again when an app sets its
        provider after the first use; making one costs about as much as a span)."""
        provider = self.trace.get_tracer_provider()
        made = self._tracer
        if made is None or made[0] is not provider:
            made = self._tracer = (provider, provider.get_tracer("asyncbook", __version__))
        return made[1]


class Tracing:
    """The spans of tracked tasks published and run in this process (off unless
    ``asyncbook_tracing``)."""

    def __init__(
        self, app: Celery, settings: Lazy[Settings], book: Lazy[AsyncBook] | None = None
    ) -> None:
        self.app = app
        self.settings = settings
        self.book = book
        """The book: one that keeps trace contexts records the ends of revoked messages
        in the delivery pass (``_trace_ends``), once per end."""
        self.otel: Lazy[_Otel] = Lazy(_Otel)
        self.local = threading.local()

    def _on(self, task: object) -> bool:
        return (
            isinstance(task, Task)
            and task.app is self.app
            and is_tracked(task)
            and self.settings.get().tracing
        )

    def _attempts(self) -> list[_Attempt]:
        attempts: list[_Attempt] | None = getattr(self.local, "attempts", None)
        if attempts is None:
            attempts = self.local.attempts = []
        return attempts

    def _attempt(self, task_id: object) -> _Attempt | None:
        for attempt in reversed(self._attempts()):
            if attempt.task_id == task_id:
                return attempt
        return None

    # -- publish ------------------------------------------------------------------------

    def trace_publish(
        self,
        sender: object = None,
        headers: dict[str, Any] | None = None,
        routing_key: Any = None,
        **_: Any,
    ) -> None:
        """A send span, its context and the publish time into the message's headers."""
        if headers is None or not isinstance(sender, str):
            return
        task_id = headers.get("id")
        if not isinstance(task_id, str) or not self._on(self.app.tasks.get(sender)):
            return
        otel = self.otel.get()
        parent = None
        if int(headers.get("retries") or 0) > 0:
            running = self._attempt(task_id)  # a retry: beside its attempt, not under it
            parent = None if running is None else running.parent
        queue = routing_key if isinstance(routing_key, str) else None
        span = otel.tracer().start_span(
            f"send {queue or sender}",
            context=parent,
            kind=otel.trace.SpanKind.PRODUCER,
            attributes={
                **messaging_attributes("send", queue, task_id),
                "asyncbook.task.name": sender,
                "asyncbook.retries": int(headers.get("retries") or 0),
            },
        )
        for name in TRACE_HEADERS[:2]:  # a retry's message has its attempt's (the baggage stays)
            headers.pop(name, None)
        otel.propagate.inject(headers, context=otel.trace.set_span_in_context(span, parent))
        headers[PUBLISHED_HEADER] = time.time_ns()
        span.end()

    # -- an attempt -----------------------------------------------------------------------

    def trace_prerun(self, task_id: str | None = None, task: object = None, **_: Any) -> None:
        """The queued span (publish to now) and the attempt's span, made current."""
        if task_id is None or not self._on(task):
            return
        assert isinstance(task, Task)
        otel, request = self.otel.get(), task.request
        carrier = {name: request.get(name) for name in TRACE_HEADERS}
        parent = otel.propagate.extract({k: v for k, v in carrier.items() if isinstance(v, str)})
        tracer, now = otel.tracer(), time.time_ns()
        retries = int(request.retries or 0)
        queue = (request.delivery_info or {}).get("routing_key")
        queue = queue if isinstance(queue, str) else None
        task_attributes: dict[str, str | int] = {
            "asyncbook.task.name": task.name,
            "asyncbook.retries": retries,
        }
        published = request.get(PUBLISHED_HEADER)
        if isinstance(published, int) and 0 < published <= now:
            queued = tracer.start_span(
                f"queued {task.name}",
                context=parent,
                start_time=published,
                attributes={**messaging_attributes("receive", queue, task_id), **task_attributes},
            )
            queued.end(end_time=now)
        span = tracer.start_span(
            f"process {queue or task.name}",
            context=parent,
            kind=otel.trace.SpanKind.CONSUMER,
            start_time=now,
            attributes={**messaging_attributes("process", queue, task_id), **task_attributes},
        )
        token = otel.context.attach(otel.trace.set_span_in_context(span, parent))
        self._attempts().append(_Attempt(task_id, parent, span, token))

    def trace_retry(
        self, sender: object = None, request: Any = None, reason: Any = None, **_: Any
    ) -> None:
        """The attempt asked for a retry."""
        attempt = self._attempt(getattr(request, "id", None))
        if attempt is None:
            return
        error = getattr(reason, "exc", None) or reason
        text = describe_error(error) if isinstance(error, BaseException) else str(reason)
        attempt.span.add_event("asyncbook.retry", {"exception.message": text})
        attempt.span.set_attribute("asyncbook.outcome", "retry")
        attempt.span.set_status(self.otel.get().trace.StatusCode.ERROR, text)

    def _end(self, task_id: object, state: str, error: BaseException | None = None) -> None:
        attempt = self._attempt(task_id)
        if attempt is None or attempt.ended:
            return
        attempt.ended = True
        span, status = attempt.span, self.otel.get().trace.StatusCode
        if error is not None:
            span.record_exception(error)
            span.set_status(status.ERROR, describe_error(error))
        else:
            span.set_status(status.OK)
        span.set_attribute("asyncbook.outcome", state)
        span.set_attribute("asyncbook.state", state)
        span.add_event("asyncbook.end", {"asyncbook.state": state})

    def trace_success(self, sender: object = None, **_: Any) -> None:
        """The task succeeded: its end on the attempt's span."""
        self._end(getattr(getattr(sender, "request", None), "id", None), "succeeded")

    def trace_failure(
        self, task_id: str | None = None, exception: BaseException | None = None, **_: Any
    ) -> None:
        """The task failed (no retry left): its end on the attempt's span."""
        self._end(task_id, "failed", exception)

    def trace_revoked(
        self,
        sender: object = None,
        request: Any = None,
        expired: bool = False,
        terminated: bool = False,
        **_: Any,
    ) -> None:
        """A worker revoked the message (expired, or cancelled): a short span in its
        trace, with the end as its event."""
        task_id = getattr(request, "id", None)
        if not isinstance(task_id, str) or not self._on(sender):
            return
        assert isinstance(sender, Task)
        state = "expired" if expired else "cancelled"
        reason = "expired" if expired else "terminated" if terminated else "revoked"
        attempt = self._attempt(task_id)
        if attempt is not None:  # revoked while running, in this thread
            attempt.span.add_event("asyncbook.end", {"asyncbook.state": state})
            return
        if request.get(PUBLISHED_HEADER) is not None and self._keeps_traces():
            return  # a traced publish's context is in the book: the delivery records the end
        self.end_span(sender.name, task_id, request.get, state, reason)

    def _keeps_traces(self) -> bool:
        return self.book is not None and isinstance(self.book.get(), TraceStore)

    def end_span(self, name: str, task_id: str, header: Any, state: str, reason: str) -> None:
        """A task's end away from its attempts (a revoked message, a sweep's): a short span
        in the trace its message carried (``header(name)`` reads a header), its event
        ``asyncbook.end``."""
        otel = self.otel.get()
        carrier = {key: header(key) for key in TRACE_HEADERS}
        parent = otel.propagate.extract({k: v for k, v in carrier.items() if isinstance(v, str)})
        span = otel.tracer().start_span(
            f"end {name}",
            context=parent,
            attributes={"messaging.message.id": task_id, "asyncbook.task.name": name},
        )
        span.set_attribute("asyncbook.state", state)
        span.add_event("asyncbook.end", {"asyncbook.state": state, "asyncbook.reason": reason})
        span.end()

    def stored_end(
        self,
        name: str,
        task_id: str,
        stored: str,
        state: str,
        at_ms: float,
        error: str | None = None,
    ) -> bool:
        """An end no worker saw (the sweep's, a cancel through the book): a short span at
        ``at_ms``, a child of the publish's ``stored`` context (``trace_context``), its
        event ``asyncbook.end``; False when ``stored`` is no W3C trace context."""
        otel = self.otel.get()
        traceparent, _, tracestate = stored.partition("\n")
        carrier = {"traceparent": traceparent, **({"tracestate": tracestate} if tracestate else {})}
        parent = otel.w3c.extract(carrier)
        if not otel.trace.get_current_span(parent).get_span_context().is_valid:
            return False
        at_ns = int(at_ms * 1_000_000)
        span = otel.tracer().start_span(
            f"end {name}",
            context=parent,
            kind=otel.trace.SpanKind.INTERNAL,
            start_time=at_ns,
            attributes={
                "messaging.message.id": task_id,
                "asyncbook.task.name": name,
                "asyncbook.state": state,
            },
        )
        event: dict[str, str] = {"asyncbook.state": state}
        if error is not None:
            event["exception.message"] = error
            span.set_status(otel.trace.StatusCode.ERROR, error)
        span.add_event("asyncbook.end", event, timestamp=at_ns)
        span.end(end_time=at_ns)
        return True

    def trace_postrun(self, task_id: str | None = None, **_: Any) -> None:
        """The attempt is over: its span ends and is no longer current."""
        attempts = self._attempts()
        attempt = self._attempt(task_id)
        if attempt is None:
            return
        attempts.remove(attempt)
        otel = self.otel.get()
        otel.context.detach(attempt.token)
        attempt.span.end()

    def publish_handlers(self) -> list[Handler]:
        """Its signal at a publish (before the book's create: its info keeps the send
        span's context, ``trace_context``)."""
        return [(signals.before_task_publish, self.trace_publish)]

    def handlers(self) -> list[Handler]:
        """Its signals at an attempt: its start, retry, end and postrun."""
        return [
            (signals.task_prerun, self.trace_prerun),
            (signals.task_retry, self.trace_retry),
            (signals.task_success, self.trace_success),
            (signals.task_failure, self.trace_failure),
            (signals.task_postrun, self.trace_postrun),
            (signals.task_revoked, self.trace_revoked),
        ]
