"""The tests' OpenTelemetry SDK: one tracer provider per process, its spans in memory."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

__all__ = ["memory_spans", "spans_of"]

_EXPORTER = InMemorySpanExporter()


def memory_spans() -> InMemorySpanExporter:
    """The exporter every span this process ends goes to (set up on first use; the
    global tracer provider can be set once per process), cleared."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    return _EXPORTER


def spans_of(exporter: InMemorySpanExporter, task_id: str) -> list[ReadableSpan]:
    """The finished spans about ``task_id`` (its message id), in the order they ended."""
    return [
        span
        for span in exporter.get_finished_spans()
        if (span.attributes or {}).get("messaging.message.id") == task_id
    ]
