"""The Celery app, configured by the top-level ``celeryconfig.py`` (``config_from_object``:
the environment, with loopback defaults), with asyncbook installed and the demo's four
tasks (``asyncbook.cli._demo_tasks.add_demo_tasks``)."""

from celery import Celery

from asyncbook.celery import install
from asyncbook.cli._demo_tasks import add_demo_tasks

__all__ = ["app", "flaky_fetch", "generate", "integration", "outlive", "reject_input"]

app = Celery("workers")
app.config_from_object("celeryconfig")
integration = install(app)
generate, flaky_fetch, reject_input, outlive = add_demo_tasks(app)
