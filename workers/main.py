"""The Celery app: the demo's (``asyncbook.cli._demo_app``), configured from the environment,
with asyncbook installed."""

from asyncbook.cli._demo_app import app, integration

__all__ = ["app", "integration"]
