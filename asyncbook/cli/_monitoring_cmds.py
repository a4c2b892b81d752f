"""``asyncbook monitoring``: print the Grafana dashboard or the Prometheus alert rules the
package ships, to import into Grafana or load into Prometheus."""

from __future__ import annotations

import click

__all__ = ["monitoring"]


@click.group()
def monitoring() -> None:
    """Print the Grafana dashboard or the Prometheus alert rules for /metrics."""


@monitoring.command()
def dashboard() -> None:
    """Print the Grafana dashboard (JSON): asyncbook monitoring dashboard > asyncbook.json"""
    from ..web._monitoring import grafana_dashboard

    click.echo(grafana_dashboard(), nl=False)


@monitoring.command()
def rules() -> None:
    """Print the Prometheus alert rules (YAML): asyncbook monitoring rules > asyncbook-rules.yml"""
    from ..web._monitoring import alert_rules

    click.echo(alert_rules(), nl=False)
