"""Lifecycle traces from a prefork worker, exported through OTLP/HTTP to a receiver this
test runs on loopback (the spans decoded with opentelemetry-proto): the publisher's trace,
task from task, a retry, an expired message's end (recorded by the worker's delivery
thread from the trace context the book keeps)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import redis
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from ..support import ROOT
from ..support.celery import CELERY_URL, CeleryWorker, wait_for

PUBLISH = """
import json
from datetime import datetime, timedelta, timezone
from opentelemetry import trace
from tests.support.traced_app import flaky, leaf, parent, provider
past = datetime.now(timezone.utc) - timedelta(seconds=5)
with trace.get_tracer("publisher").start_as_current_span("request") as span:
    ids = {"parent": parent.delay().id, "flaky": flaky.delay().id}
    ids["expired"] = leaf.apply_async((2,), expires=past).id
ids["trace"] = format(span.get_span_context().trace_id, "032x")
ids["child"] = parent.AsyncResult(ids["parent"]).get(timeout=30)
provider.force_flush()
print(json.dumps(ids), flush=True)
"""


class _Receiver(BaseHTTPRequestHandler):
    spans: list[Span]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        request = ExportTraceServiceRequest.FromString(body)
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                self.spans.extend(scope.spans)
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *_: object) -> None:
        pass


@contextmanager
def receiver() -> Iterator[tuple[str, list[Span]]]:
    """An OTLP/HTTP traces endpoint on loopback, and the spans it received."""
    spans: list[Span] = []
    handler = type("Receiver", (_Receiver,), {"spans": spans})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces", spans
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def _message_id(span: Span) -> str | None:
    for attribute in span.attributes:
        if attribute.key == "messaging.message.id":
            return str(attribute.value.string_value)
    return None


def test_a_prefork_workers_spans_join_the_publishers_trace(tmp_path: Path) -> None:
    with receiver() as (endpoint, spans):
        worker = CeleryWorker(
            ROOT, CELERY_URL, tmp_path / "worker.log", app="tests.support.traced_app"
        )
        worker.env = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint}
        broker = redis.Redis.from_url(CELERY_URL)
        with worker.running(broker):
            env = {
                **os.environ,
                "REDIS_URL": CELERY_URL,
                "ASYNCBOOK_NAMESPACE": worker.namespace,
                "ASYNCBOOK_QUEUE": worker.queue,
                "PYTHONPATH": str(ROOT),
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint,
            }
            published = subprocess.run(
                [sys.executable, "-c", PUBLISH],
                cwd=ROOT,
                env=env,
                capture_output=True,
                timeout=90,
                check=False,
            )
            assert published.returncode == 0, published.stderr.decode(errors="replace")
            ids = json.loads(published.stdout)

            def processed(task_id: str) -> list[Span]:
                return [
                    s for s in spans if _message_id(s) == task_id and s.name.startswith("process")
                ]

            def ended(task_id: str) -> list[Span]:
                return [s for s in spans if _message_id(s) == task_id and s.name.startswith("end")]

            wait_for(
                lambda: (
                    len(processed(ids["flaky"])) == 2
                    and processed(ids["child"])
                    and ended(ids["expired"])
                ),
                timeout=60,
            )
    trace_id = bytes.fromhex(ids["trace"])
    mine = {ids["parent"], ids["flaky"], ids["child"], ids["expired"]}
    ours = [s for s in spans if _message_id(s) in mine]
    assert {s.trace_id for s in ours} == {trace_id}
    (outer,) = processed(ids["parent"])
    (child_send,) = [
        s for s in ours if _message_id(s) == ids["child"] and s.name.startswith("send")
    ]
    assert child_send.parent_span_id == outer.span_id
    first, second = sorted(processed(ids["flaky"]), key=lambda s: s.start_time_unix_nano)
    assert [event.name for event in first.events] == ["asyncbook.retry"]
    assert [event.name for event in second.events] == ["asyncbook.end"]
    (expired,) = ended(ids["expired"])  # once: by the worker's delivery thread, from the book
    assert [event.name for event in expired.events] == ["asyncbook.end"]
    (expired_send,) = [
        s for s in ours if _message_id(s) == ids["expired"] and s.name.startswith("send")
    ]
    assert expired.parent_span_id == expired_send.span_id
    assert processed(ids["expired"]) == []
