"""Ends no worker sees, in the task's trace (``asyncbook_tracing``): the sweep's expiry
at the deadline, a stalled attempt, a cancel through the book; recorded by the delivery
pass from the trace context the book keeps beside the record."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import fakeredis
import pytest
from celery import Celery
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from asyncbook import AsyncBookError, RedisBook, sweep
from asyncbook._console import TRACE_LIMIT, PublishInfo
from asyncbook.celery import Integration, install, uninstall
from asyncbook.celery._trace_ends import GROUP_SUFFIX
from asyncbook.celery._tracing import trace_context

from ..support.celery import memory_app
from ..support.tracing import memory_spans, spans_of

HOUR_MS = 3_600_000


@dataclass
class Traced:
    app: Celery
    book: RedisBook
    integration: Integration
    spans: InMemorySpanExporter
    client: Any

    def publish(self, name: str) -> tuple[str, trace.SpanContext]:
        """``name`` published (no worker runs it) under a request span: its id and the
        request's context."""
        with trace.get_tracer("test").start_as_current_span("request") as request:
            result = self.app.tasks[name].delay()
        return str(result.id), request.get_span_context()

    def end_span(self, task_id: str) -> ReadableSpan:
        """Its one end span, once a delivery pass recorded it."""
        self.integration.deliver()
        (end,) = [span for span in spans_of(self.spans, task_id) if span.name.startswith("end")]
        return end


def make(tracing: bool, shards: int = 1, **conf: Any) -> Traced:
    app = memory_app("trace-ends", asyncbook_tracing=tracing, **conf)

    @app.task(name="ends.wait", shared=False, tracked=True, ttl=60)
    def wait() -> None: ...

    @app.task(name="ends.beat", shared=False, tracked=True, ttl=60, heartbeat_timeout=1)
    def beat() -> None: ...

    client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    book = RedisBook(client, namespace="trace-ends", shards=shards)
    return Traced(app, book, install(app, book), memory_spans(), client)


@pytest.fixture
def traced() -> Iterator[Traced]:
    made = make(tracing=True)
    yield made
    uninstall(made.app)


def assert_in_trace(end: ReadableSpan, traced: Traced, task_id: str, request: Any) -> None:
    """``end`` is a child of the task's send span, in the request's trace."""
    (send,) = [span for span in spans_of(traced.spans, task_id) if span.name.startswith("send")]
    assert end.context is not None
    assert send.context is not None
    assert end.context.trace_id == request.trace_id
    assert end.parent is not None
    assert end.parent.span_id == send.context.span_id
    assert end.kind is trace.SpanKind.INTERNAL
    assert [event.name for event in end.events] == ["asyncbook.end"]


def test_a_task_expired_queued_by_the_sweep_ends_in_its_trace(traced: Traced) -> None:
    task_id, request = traced.publish("ends.wait")
    deadline = traced.book.get(task_id)
    assert deadline is not None
    assert sweep(traced.book, deadline.expires_at_ms + 1).expired == 1
    end = traced.end_span(task_id)
    assert_in_trace(end, traced, task_id, request)
    assert end.name == "end ends.wait"
    assert (end.attributes or {})["asyncbook.state"] == "expired"
    assert end.start_time == int((deadline.expires_at_ms) * 1_000_000)
    traced.integration.deliver()  # read once: no second span
    assert len([s for s in spans_of(traced.spans, task_id) if s.name.startswith("end")]) == 1


def test_a_cancel_through_the_book_ends_in_its_trace(traced: Traced) -> None:
    task_id, request = traced.publish("ends.wait")
    traced.book.cancel(task_id, "not needed", actor="cli:ann")
    end = traced.end_span(task_id)
    assert_in_trace(end, traced, task_id, request)
    assert (end.attributes or {})["asyncbook.state"] == "cancelled"


def test_a_stalled_attempt_ends_in_its_trace(traced: Traced) -> None:
    task_id, request = traced.publish("ends.beat")
    now = traced.book.now_ms()
    traced.book.apply(task_id, {"type": "start", "atMs": now, "worker": "w1"})
    (stalled,) = traced.book.end_stalled(now + 10_000)
    assert not isinstance(stalled, Exception)
    assert stalled.task.state == "failed"
    end = traced.end_span(task_id)
    assert_in_trace(end, traced, task_id, request)
    assert (end.attributes or {})["asyncbook.state"] == "failed"
    (event,) = end.events
    assert str((event.attributes or {})["exception.message"]).startswith("stalled")
    assert end.status.status_code is trace.StatusCode.ERROR


def test_a_workers_failure_is_not_recorded_again(traced: Traced) -> None:
    task_id, _request = traced.publish("ends.wait")
    now = traced.book.now_ms()
    traced.book.apply(task_id, {"type": "start", "atMs": now, "worker": "w1"})
    failure = {"type": "fail", "atMs": now + 1, "error": "ValueError: no", "retryable": False}
    traced.book.apply(task_id, failure)
    traced.integration.deliver()
    assert [s for s in spans_of(traced.spans, task_id) if s.name.startswith("end")] == []


def test_without_tracing_no_context_is_kept_nor_read() -> None:
    made = make(tracing=False)
    try:
        task_id, _request = made.publish("ends.wait")
        made.book.cancel(task_id, "not needed")
        made.integration.deliver()
        keys = made.book.ns.first.keys
        assert made.client.hget(keys.task(task_id), "tc") is None
        groups = made.client.xinfo_groups(keys.outbox) if made.client.exists(keys.outbox) else []
        assert not any(str(g["name"]).endswith(GROUP_SUFFIX) for g in groups)
        assert spans_of(made.spans, task_id) == []
    finally:
        uninstall(made.app)


def test_the_context_is_kept_beside_the_record_never_shown(traced: Traced) -> None:
    task_id, _request = traced.publish("ends.wait")
    keys = traced.book.ns.first.keys
    stored = traced.client.hget(keys.task(task_id), "tc")
    assert stored is not None
    assert stored.decode().startswith("00-")
    info = traced.book.info(task_id)
    assert info is not None
    trace_id = stored.decode().split("-")[1]  # 00-<trace id>-<span id>-<flags>
    assert trace_id not in info.model_dump_json()


def test_each_shard_s_ends_are_read_in_one_pass() -> None:
    made = make(tracing=True, shards=3)
    try:
        published = [made.publish("ends.wait") for _ in range(6)]
        for task_id, _request in published:
            made.book.cancel(task_id, "not needed")
        made.integration.deliver()
        for task_id, request in published:
            (end,) = [s for s in spans_of(made.spans, task_id) if s.name.startswith("end")]
            assert_in_trace(end, made, task_id, request)
    finally:
        uninstall(made.app)


def test_a_kept_message_keeps_no_trace_context() -> None:
    """A resend publishes it as a new task, in the resender's trace."""
    made = make(tracing=True, asyncbook_keep_messages=True)
    try:
        task_id, _request = made.publish("ends.wait")
        kept = made.client.get(made.book.ns.first.keys.message(task_id))
        assert kept is not None
        assert b"traceparent" not in kept
        assert b"asyncbook_published_ns" not in kept
        assert made.client.hget(made.book.ns.first.keys.task(task_id), "tc") is not None
    finally:
        uninstall(made.app)


def test_the_stored_context_is_bounded() -> None:
    parent = "00-" + "1" * 32 + "-" + "2" * 16 + "-01"
    assert trace_context({"traceparent": parent}) == parent
    assert trace_context({"traceparent": parent, "tracestate": "a=1"}) == f"{parent}\na=1"
    long_state = "k=" + "v" * TRACE_LIMIT
    assert trace_context({"traceparent": parent, "tracestate": long_state}) == parent
    assert trace_context({"traceparent": "x" * (TRACE_LIMIT + 1)}) is None
    assert trace_context({"traceparent": parent + "\n"}) is None
    assert trace_context({}) is None


def test_a_book_refuses_a_trace_context_past_the_limit_by_name() -> None:
    book = RedisBook(fakeredis.FakeRedis(server=fakeredis.FakeServer()), namespace="bounded")
    info = PublishInfo(trace="0" * (TRACE_LIMIT + 1))
    with pytest.raises(AsyncBookError, match=r"info\.trace") as raised:
        book.create(id="t", now_ms=0, ttl_ms=HOUR_MS, max_attempts=1, info=info)
    assert raised.value.field == "info.trace"
