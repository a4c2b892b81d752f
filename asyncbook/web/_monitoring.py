"""The Grafana dashboard and the Prometheus alert rules shipped in the package
(``web/monitoring/``, package data): ``asyncbook monitoring dashboard`` and ``asyncbook
monitoring rules`` print them. Every query they hold names a family ``/metrics`` writes
(``_metrics``), which a test holds them to.
"""

from __future__ import annotations

from importlib.resources import files

__all__ = ["DASHBOARD_FILE", "RULES_FILE", "alert_rules", "grafana_dashboard"]

DASHBOARD_FILE = "asyncbook-dashboard.json"
RULES_FILE = "asyncbook-rules.yml"


def _read(name: str) -> str:
    return (files("asyncbook.web") / "monitoring" / name).read_text(encoding="utf-8")


def grafana_dashboard() -> str:
    """The Grafana dashboard (JSON; its data source is the ``DS_PROMETHEUS`` input)."""
    return _read(DASHBOARD_FILE)


def alert_rules() -> str:
    """The Prometheus alert rules (a rule file, YAML)."""
    return _read(RULES_FILE)
