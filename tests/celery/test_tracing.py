"""Lifecycle traces in one process: a threaded worker, a memory broker, the SDK's
in-memory exporter (``asyncbook_tracing``)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import fakeredis
import pytest
from celery import Celery, Task
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from asyncbook import AsyncBookError, MemoryBook, RedisBook
from asyncbook.celery import Integration
from asyncbook.celery import _settings as settings_module
from asyncbook.celery._settings import Settings
from asyncbook.celery._tracing import messaging_attributes

from ..support.celery import memory_app, threaded_worker, wait_for
from ..support.tracing import memory_spans, spans_of


def make_app() -> Celery:
    app = memory_app("traced", asyncbook_tracing=True)

    @app.task(shared=False, tracked=True, ttl=30)
    def leaf(value: int) -> int:
        return value

    @app.task(bind=True, shared=False, tracked=True, ttl=30)
    def parent(self: Task[Any, Any]) -> str:
        return str(leaf.delay(1).id)

    @app.task(bind=True, shared=False, tracked=True, ttl=30, max_retries=3)
    def flaky(self: Task[Any, Any]) -> str:
        if self.request.retries < 1:
            raise self.retry(exc=ConnectionError("busy"), countdown=0.05)
        return "ok"

    @app.task(shared=False, tracked=True, ttl=30, max_retries=0)
    def doomed() -> None:
        raise ValueError("bad input")

    return app


@pytest.fixture(scope="module")
def app() -> Celery:
    return make_app()


@pytest.fixture(scope="module")
def integration(app: Celery) -> Iterator[Integration]:
    book = RedisBook(fakeredis.FakeRedis(server=fakeredis.FakeServer()), namespace="traced")
    with threaded_worker(app, book) as integration:
        yield integration


@pytest.fixture
def spans(integration: Integration) -> InMemorySpanExporter:
    return memory_spans()


def task_of(app: Celery, name: str) -> Task[Any, Any]:
    return app.tasks[f"tests.celery.test_tracing.{name}"]


def named(spans: list[ReadableSpan], prefix: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name.startswith(prefix)]


def ended(spans: InMemorySpanExporter, task_id: str, attempts: int = 1) -> list[ReadableSpan]:
    found: list[ReadableSpan] = wait_for(
        lambda: (
            (found := spans_of(spans, task_id))
            and len(named(found, "process")) == attempts
            and found
        ),
        timeout=30,
    )
    return found


def test_a_task_joins_its_publishers_trace(app: Celery, spans: InMemorySpanExporter) -> None:
    with trace.get_tracer("test").start_as_current_span("request") as request:
        result = task_of(app, "leaf").delay(7)
    assert result.get(timeout=10) == 7
    found = ended(spans, result.id)
    (send,) = named(found, "send")
    (queued,) = named(found, "queued")
    (process,) = named(found, "process")
    trace_id = request.get_span_context().trace_id
    assert {span.context.trace_id for span in found if span.context} == {trace_id}
    assert send.parent is not None
    assert send.parent.span_id == request.get_span_context().span_id
    assert send.kind is trace.SpanKind.PRODUCER
    assert process.kind is trace.SpanKind.CONSUMER
    assert send.context is not None
    for span in (queued, process):
        assert span.parent is not None
        assert span.parent.span_id == send.context.span_id
    assert queued.start_time is not None
    assert queued.end_time is not None
    assert queued.end_time <= (process.start_time or 0)
    assert (process.attributes or {})["asyncbook.state"] == "succeeded"
    assert [event.name for event in process.events] == ["asyncbook.end"]


def test_a_task_published_by_a_task_is_its_attempts_child(
    app: Celery, spans: InMemorySpanExporter
) -> None:
    result = task_of(app, "parent").delay()
    child_id = result.get(timeout=10)
    (outer,) = named(ended(spans, result.id), "process")
    child = ended(spans, child_id)
    (send,) = named(child, "send")
    assert outer.context is not None
    assert send.parent is not None
    assert send.parent.span_id == outer.context.span_id
    assert {span.context.trace_id for span in child if span.context} == {outer.context.trace_id}


def test_each_attempt_is_a_span_and_a_retry_an_event(
    app: Celery, spans: InMemorySpanExporter
) -> None:
    result = task_of(app, "flaky").delay()
    assert result.get(timeout=30) == "ok"
    found = ended(spans, result.id, attempts=2)
    first, second = named(found, "process")
    assert [event.name for event in first.events] == ["asyncbook.retry"]
    assert first.status.status_code is trace.StatusCode.ERROR
    assert (first.attributes or {})["asyncbook.retries"] == 0
    assert (second.attributes or {})["asyncbook.retries"] == 1
    assert (second.attributes or {})["asyncbook.state"] == "succeeded"
    assert len(named(found, "send")) == 2
    assert len(named(found, "queued")) == 2
    assert len({span.context.trace_id for span in found if span.context}) == 1


def test_a_failure_ends_its_attempts_span_in_error(
    app: Celery, spans: InMemorySpanExporter
) -> None:
    result = task_of(app, "doomed").delay()
    with pytest.raises(ValueError, match="bad input"):
        result.get(timeout=10)
    (process,) = named(ended(spans, result.id), "process")
    assert process.status.status_code is trace.StatusCode.ERROR
    assert (process.attributes or {})["asyncbook.state"] == "failed"
    assert [event.name for event in process.events] == ["exception", "asyncbook.end"]


def test_an_expired_message_ends_in_its_trace(
    app: Celery, integration: Integration, spans: InMemorySpanExporter
) -> None:
    """The book keeps the publish's trace context: the delivery pass records the end (a
    worker's delivery thread; this in-process worker runs none), once."""
    past = datetime.now(UTC) - timedelta(seconds=5)
    with trace.get_tracer("test").start_as_current_span("request") as request:
        result = task_of(app, "leaf").apply_async((1,), expires=past)
    end = wait_for(
        lambda: integration.deliver() and named(spans_of(spans, result.id), "end"), timeout=30
    )[0]
    assert end.context is not None
    assert end.context.trace_id == request.get_span_context().trace_id
    assert (end.attributes or {})["asyncbook.state"] == "expired"
    assert [event.name for event in end.events] == ["asyncbook.end"]
    assert named(spans_of(spans, result.id), "process") == []


def test_a_book_without_trace_contexts_has_the_worker_record_the_end(
    spans: InMemorySpanExporter,
) -> None:
    app = memory_app("traced-memory", asyncbook_tracing=True)

    @app.task(shared=False, tracked=True, ttl=30)
    def late() -> int:
        return 1

    past = datetime.now(UTC) - timedelta(seconds=5)
    with threaded_worker(app, MemoryBook()):
        result = late.apply_async(expires=past)
        end = wait_for(lambda: named(spans_of(spans, result.id), "end"), timeout=30)[0]
    assert (end.attributes or {})["asyncbook.state"] == "expired"


def test_tracing_is_off_unless_asked(spans: InMemorySpanExporter) -> None:
    app = memory_app("untraced")

    @app.task(shared=False, tracked=True, ttl=30)
    def quiet() -> int:
        return 1

    book = RedisBook(fakeredis.FakeRedis(server=fakeredis.FakeServer()), namespace="untraced")
    with threaded_worker(app, book):
        assert quiet.delay().get(timeout=10) == 1
    assert spans.get_finished_spans() == ()


def test_a_bad_value_is_refused_by_name() -> None:
    with pytest.raises(AsyncBookError, match="asyncbook_tracing") as raised:
        Settings.from_conf({"asyncbook_tracing": "yes"})
    assert raised.value.field == "asyncbook_tracing"


def test_tracing_without_the_api_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settings_module, "find_spec", lambda name: None)
    with pytest.raises(AsyncBookError, match=r"asyncbook\[otel\]") as raised:
        Settings.from_conf({"asyncbook_tracing": True})
    assert raised.value.field == "asyncbook_tracing"
    assert Settings.from_conf({"asyncbook_tracing": False}).tracing is False


@pytest.mark.parametrize(
    ("opt_in", "operation"),
    [
        ("", {"messaging.operation": "publish"}),
        ("http,messaging", {"messaging.operation.type": "send"}),
        (
            "messaging/dup",
            {"messaging.operation": "publish", "messaging.operation.type": "send"},
        ),
    ],
)
def test_messaging_attributes_follow_the_opt_in(
    monkeypatch: pytest.MonkeyPatch, opt_in: str, operation: dict[str, str]
) -> None:
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", opt_in)
    attributes = messaging_attributes("send", "q", "id-1")
    assert attributes["messaging.destination.name"] == "q"
    assert attributes["messaging.message.id"] == "id-1"
    assert {k: v for k, v in attributes.items() if k.startswith("messaging.operation")} == {
        **operation,
        **({"messaging.operation.name": "send"} if "messaging.operation.type" in operation else {}),
    }


def test_importing_and_installing_loads_no_opentelemetry() -> None:
    """Not until tracing is first needed (redis-py loads a part of the API of its own when
    it is installed: only what asyncbook adds counts)."""
    code = (
        "import sys, redis\n"
        "before = {m for m in sys.modules if m.startswith('opentelemetry')}\n"
        "import asyncbook, asyncbook.celery\n"
        "from celery import Celery\n"
        "app = Celery('a', broker='memory://', set_as_current=False)\n"
        "asyncbook.celery.install(app)\n"
        "app.tasks  # finalized\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry') and m not in before))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"
