"""The Grafana dashboard and the Prometheus alert rules the package ships: every query
parses (promql-parser, the Prometheus parser's Rust port) and names only metrics and labels
a real server's ``/metrics`` writes; the rules pass ``promtool check rules`` and their unit
tests (``promtool test rules``); the wheel ships both, and ``asyncbook monitoring`` prints
them."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import httpx
import promql_parser
import pytest
import yaml
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from asyncbook import FailEvent, StartEvent, SucceedEvent, WorkerRecord
from asyncbook._console import PublishInfo
from asyncbook.celery import RedisBroker
from asyncbook.cli import cli
from asyncbook.web._monitoring import (
    DASHBOARD_FILE,
    RULES_FILE,
    alert_rules,
    grafana_dashboard,
)

from ..support import ROOT
from ..support.broker import ready_queue
from ..support.celery import CELERY_URL
from ..support.web_server import Running, running_server

pytestmark = pytest.mark.redis

PROMTOOL = shutil.which("promtool")
MONITORING = ROOT / "asyncbook" / "web" / "monitoring"
RULES_TEST = Path(__file__).parent / "promtool" / "alert_rules_test.yml"
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$name": ".*"}
"""Grafana's variables in the dashboard's queries, replaced by what PromQL parses."""

Exported = dict[str, set[str]]
"""Each sample name ``/metrics`` writes -> the label names it carries."""


@pytest.fixture(scope="module")
def exported() -> Exported:
    """The sample names and labels of a real server's ``/metrics``, over a book holding
    tasks of every kind (so every family has samples): named tasks ended every way, one
    running, one queued, a worker seen and online, a consumer group reading the outbox,
    and a queue of ready messages no online worker consumes."""
    broker = RedisBroker(CELERY_URL)
    with ready_queue(1) as unconsumed, running_server(broker=broker) as server:
        seed(server)
        server.book.announce_worker(WorkerRecord(name="celery@w1", queues=("mail",)))
        with httpx.Client(base_url=server.url, timeout=10) as client:
            text = client.get("/metrics").text
    broker.close()
    assert f'asyncbook_queue_unconsumed{{queue="{unconsumed}"}} 1.0' in text
    names: Exported = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            names.setdefault(sample.name, set()).update(sample.labels)
    return names


def seed(server: Running) -> None:
    book = server.book
    now = book.now_ms()
    for n, outcome in enumerate(("succeeded", "failed", "running", "queued")):
        task_id = f"t{n}"
        info = PublishInfo(name="mail.send", queue="mail")
        book.create(id=task_id, now_ms=now - 10_000, ttl_ms=3_600_000, max_attempts=1, info=info)
        if outcome == "queued":
            continue
        book.apply(task_id, StartEvent(at_ms=now - 9_000, worker="celery@w1"))
        if outcome == "succeeded":
            book.apply(task_id, SucceedEvent(at_ms=now - 8_000, result_ref="r", result_hash="h"))
        elif outcome == "failed":
            book.apply(task_id, FailEvent(at_ms=now - 8_000, error="x", retryable=False))
    book.consume_notifications("mailer", "c1", count=1)
    book.record_sweep(now)


def selectors(expr: str) -> list[tuple[str, set[str]]]:
    """Each series selector of ``expr``: the metric it names and the labels it matches."""
    found: list[tuple[str, set[str]]] = []

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            labels = {matcher.name for matcher in node.matchers.matchers}
            name = node.name
            if name is None:
                name = next(m.value for m in node.matchers.matchers if m.name == "__name__")
            found.append((name, labels - {"__name__"}))

    promql_parser.walk(promql_parser.parse(expr), visit)
    return found


def assert_names_exported(expr: str, exported: Exported) -> None:
    chosen = selectors(expr)
    assert chosen, f"no metric in {expr!r}"
    for name, labels in chosen:
        assert name in exported, f"{name} (in {expr!r}) is not a metric /metrics writes"
        assert labels <= exported[name], f"{name} has no label {labels - exported[name]}"


def grafana_queries(dashboard: dict[str, Any]) -> Iterator[str]:
    """Every panel's PromQL (Grafana's variables replaced) and every variable's metric."""
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            for variable, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(variable, value)
            yield expr
    for variable in dashboard["templating"]["list"]:
        query = variable["query"]["query"]
        match = re.fullmatch(r"label_values\((.+), (\w+)\)", query)
        assert match, query
        yield match[1]


def test_every_dashboard_query_names_an_exported_metric(exported: Exported) -> None:
    dashboard = json.loads(grafana_dashboard())
    queries = list(grafana_queries(dashboard))
    assert len(queries) >= 15
    for expr in queries:
        assert_names_exported(expr, exported)
    # The families the brief asks panels for are all on it.
    used = {name for expr in queries for name, _ in selectors(expr)}
    for family in (
        "asyncbook_tasks",
        "asyncbook_task_ended_total",
        "asyncbook_task_runtime_seconds_bucket",
        "asyncbook_overdue_tasks",
        "asyncbook_sweep_last_run_timestamp_seconds",
        "asyncbook_outbox_backlog",
        "asyncbook_worker_last_seen_timestamp_seconds",
        "asyncbook_workers_online",
        "asyncbook_queue_unconsumed",
    ):
        assert family in used, family


def test_the_dashboard_imports_on_any_prometheus() -> None:
    dashboard = json.loads(grafana_dashboard())
    (source,) = dashboard["__inputs"]
    assert (source["name"], source["type"], source["pluginId"]) == (
        "DS_PROMETHEUS",
        "datasource",
        "prometheus",
    )
    wanted = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
    for panel in dashboard["panels"]:
        assert panel["datasource"] == wanted, panel["title"]
        assert all(target["datasource"] == wanted for target in panel["targets"])
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(set(ids)) == len(ids)


def rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(alert_rules())
    return [rule for group in document["groups"] for rule in group["rules"]]


def test_every_alert_names_exported_metrics_and_says_what_to_do(exported: Exported) -> None:
    site = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["site_url"]
    assert site.startswith("https://")
    assert site.endswith("/")
    anchors = {  # each alert's section of the Monitoring page, on the documentation site
        f"{site}monitoring/#" + re.sub(r"[^a-z0-9]", "", heading.lower())
        for heading in re.findall(r"^### (.+)$", (ROOT / "docs/monitoring.md").read_text(), re.M)
    }
    found = rules()
    assert {rule["alert"] for rule in found} == {
        "AsyncbookTasksFailing",
        "AsyncbookTaskFailureRateHigh",
        "AsyncbookSweepStopped",
        "AsyncbookTasksOverdue",
        "AsyncbookOutboxBacklogGrowing",
        "AsyncbookNoWorkerSeen",
        "AsyncbookQueueUnconsumed",
    }
    for rule in found:
        assert_names_exported(rule["expr"], exported)
        assert rule["for"]
        assert rule["labels"]["severity"] in ("warning", "critical")
        assert set(rule["annotations"]) == {"summary", "description", "runbook"}
        assert rule["annotations"]["runbook"] in anchors, rule["alert"]


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    if PROMTOOL is None:
        assert os.environ.get("CI") != "true", "promtool is missing (.ci/run installs it)"
        pytest.skip("promtool is not installed (Debian's prometheus package has it)")
    return subprocess.run(
        [PROMTOOL, *args], capture_output=True, text=True, timeout=60, cwd=RULES_TEST.parent
    )


def test_promtool_checks_the_rules() -> None:
    checked = promtool("check", "rules", str(MONITORING / RULES_FILE))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 7 rules found" in checked.stdout


def test_promtool_unit_tests_of_the_alerts_pass() -> None:
    tested = promtool("test", "rules", RULES_TEST.name)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_the_wheel_ships_both_files() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["asyncbook.web"]
    for name in (DASHBOARD_FILE, RULES_FILE):
        assert (MONITORING / name).is_file()
        assert any(fnmatch(f"monitoring/{name}", pattern) for pattern in patterns), name


@pytest.mark.parametrize(
    ("command", "text"), [("dashboard", grafana_dashboard), ("rules", alert_rules)]
)
def test_asyncbook_monitoring_prints_them(command: str, text: Any) -> None:
    result = CliRunner().invoke(cli, ["monitoring", command])
    assert result.exit_code == 0, result.output
    assert result.output == text()
