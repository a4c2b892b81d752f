"""``GET /api/health`` and the sweep's metrics, on a real status server."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from asyncbook import sweep

from ..support.web_server import Running, running_server

pytestmark = pytest.mark.redis

TOKEN = "health-token-0123456789"


@pytest.fixture
def server() -> Iterator[Running]:
    with running_server(token=TOKEN) as running:
        yield running


def metric(text: str, name: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    raise AssertionError(f"{name} not in the metrics")


def test_health_answers_503_while_tasks_wait_for_a_sweep_that_stopped(server: Running) -> None:
    book = server.book
    with httpx.Client(base_url=server.url, timeout=10) as http:  # no token: open, as /metrics
        answer = http.get("/api/health")
        assert answer.status_code == 200
        body = answer.json()
        assert body["ok"] is True
        assert (body["lastSweepMs"], body["overdueTasks"]) == (None, 0)
        assert answer.headers["cache-control"] == "no-store"

        now = book.now_ms()
        book.create(id="late", now_ms=now - 60_000, ttl_ms=1_000, max_attempts=1)
        book.record_sweep(now - 45_000)
        answer = http.get("/api/health")
        assert answer.status_code == 503
        body = answer.json()
        assert (body["ok"], body["sweepStopped"], body["overdueTasks"]) == (False, True, 1)
        assert body["lastSweepMs"] == now - 45_000
        assert body["problem"].startswith("1 task(s) past their deadline and no sweep ran for")
        text = http.get("/metrics").text
        assert metric(text, "asyncbook_overdue_tasks") == 1
        assert metric(text, "asyncbook_sweep_last_run_timestamp_seconds") == (now - 45_000) / 1000

        sweep(book)
        answer = http.get("/api/health")
        assert answer.status_code == 200
        body = answer.json()
        assert (body["ok"], body["overdueTasks"]) == (True, 0)
        assert 0 <= body["lastSweepAgeMs"] < 5_000
        text = http.get("/metrics").text
        assert metric(text, "asyncbook_overdue_tasks") == 0
        paths = http.get("/openapi.json", headers={"Authorization": f"Bearer {TOKEN}"}).json()
        assert "503" in paths["paths"]["/api/health"]["get"]["responses"]


def test_a_sweep_that_never_ran_shows_as_zero_in_the_metrics(server: Running) -> None:
    with httpx.Client(base_url=server.url, timeout=10) as http:
        text = http.get("/metrics").text
    assert metric(text, "asyncbook_sweep_last_run_timestamp_seconds") == 0
