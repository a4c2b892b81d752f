"""The demo's Celery app and its four example tasks (``_demo_tasks``), shipped in the
package so that ``asyncbook demo`` runs from an installed wheel: ``celery -A
asyncbook.cli._demo_app worker -B`` is the worker the demo starts on a real Redis.

The app is configured from ``_demo_config`` (the environment: ``REDIS_URL``,
``ASYNCBOOK_NAMESPACE``, ``ASYNCBOOK_QUEUE``, ...) and has asyncbook installed. A
checkout's ``workers/`` package (``celery -A workers worker -B``, configured by the
top-level ``celeryconfig.py``) registers the same four tasks on an app of its own, beside
the lifecycle tests' tasks; it does not import this module (two installed apps in one
worker would both record its tasks).
"""

from __future__ import annotations

from celery import Celery

from ..celery import install
from ._demo_tasks import DemoTasks, TransientError, add_demo_tasks

__all__ = [
    "DemoTasks",
    "TransientError",
    "add_demo_tasks",
    "app",
    "flaky_fetch",
    "generate",
    "integration",
    "outlive",
    "reject_input",
]

app = Celery("workers")
app.config_from_object("asyncbook.cli._demo_config")
integration = install(app)
generate, flaky_fetch, reject_input, outlive = add_demo_tasks(app)
