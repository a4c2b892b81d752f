"""A traced Celery app (``asyncbook_tracing``) exporting its spans through OTLP/HTTP to
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (``tests/celery/test_tracing_otlp.py``).

``CeleryWorker(app="tests.support.traced_app")`` runs it (prefork); a publisher script
imports it too. The broker is ``REDIS_URL``, the book's namespace ``ASYNCBOOK_NAMESPACE``.
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery, Task
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from asyncbook.celery import install

__all__ = ["app", "flaky", "leaf", "parent", "provider"]

_BROKER = os.environ["REDIS_URL"]

# The SDK and exporter are the app's to set up; asyncbook uses the API's global provider.
provider = TracerProvider(resource=Resource.create({"service.name": "traced-app"}))
provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))
trace.set_tracer_provider(provider)

app = Celery("traced", broker=_BROKER, backend=_BROKER, set_as_current=True)
app.conf.update(
    task_default_queue=os.environ["ASYNCBOOK_QUEUE"],
    broker_connection_retry_on_startup=True,
    asyncbook_redis_url=_BROKER,
    asyncbook_namespace=os.environ["ASYNCBOOK_NAMESPACE"],
    asyncbook_tracing=True,
)
install(app)


@app.task(name="traced.leaf", tracked=True, ttl=60)
def leaf(value: int) -> int:
    """Returns ``value``."""
    return value


@app.task(name="traced.parent", bind=True, tracked=True, ttl=60)
def parent(self: Task[Any, Any]) -> str:
    """Publishes a ``leaf`` (task-from-task); returns its id."""
    return str(leaf.delay(1).id)


@app.task(name="traced.flaky", bind=True, tracked=True, ttl=60, max_retries=2)
def flaky(self: Task[Any, Any]) -> str:
    """Asks for one retry, then succeeds."""
    if self.request.retries < 1:
        raise self.retry(exc=ConnectionError("busy"), countdown=0.05)
    return "ok"
