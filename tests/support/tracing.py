"""The tests' OpenTelemetry SDK: one tracer provider per process, its spans in memory."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once

__all__ = ["fresh_tracer_provider", "memory_spans", "spans_of"]

_EXPORTER = InMemorySpanExporter()
_PROVIDER = TracerProvider()
_PROVIDER.add_span_processor(SimpleSpanProcessor(_EXPORTER))


def fresh_tracer_provider() -> None:
    """No global tracer provider, as in a new process (the API sets it once per process;
    a documentation snippet sets its own, as an app does)."""
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None


def memory_spans() -> InMemorySpanExporter:
    """The exporter every span this process ends goes to from now (its provider made the
    global one), cleared."""
    if trace.get_tracer_provider() is not _PROVIDER:
        fresh_tracer_provider()
        trace.set_tracer_provider(_PROVIDER)
    _EXPORTER.clear()
    return _EXPORTER


def spans_of(exporter: InMemorySpanExporter, task_id: str) -> list[ReadableSpan]:
    """The finished spans about ``task_id`` (its message id), in the order they ended."""
    return [
        span
        for span in exporter.get_finished_spans()
        if (span.attributes or {}).get("messaging.message.id") == task_id
    ]
