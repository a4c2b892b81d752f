"""The demo's Celery app and its four example tasks, shipped in the package so that
``asyncbook demo`` runs from an installed wheel: ``celery -A asyncbook.cli._demo_app worker
-B`` is the worker the demo starts on a real Redis.

The app is configured from ``_demo_config`` (the environment: ``REDIS_URL``,
``ASYNCBOOK_NAMESPACE``, ``ASYNCBOOK_QUEUE``, ...) and has asyncbook installed. One task
succeeds with progress, one retries, one fails, one is late. They are named ``demo.*``
(asyncbook never tracks a task named ``asyncbook.*``, as this module's would be). A
checkout's ``workers/`` package (``celery -A workers worker -B``) is this app with the
lifecycle tests' tasks added.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from celery import Celery, Task

from ..celery import install, report_progress

__all__ = [
    "TransientError",
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


class TransientError(ConnectionError):
    """An upstream hiccup worth retrying."""


@app.task(name="demo.generate", bind=True, tracked=True, ttl=timedelta(minutes=30), max_retries=2)
def generate(
    self: Task[Any, Any], prompt: str, steps: int = 10, delay: float = 0.2
) -> dict[str, Any]:
    """A long generation that reports progress after every chunk."""
    chunks = []
    for step in range(1, steps + 1):
        time.sleep(delay)
        chunks.append(f"{prompt}-{step}")
        report_progress(self, step * 100 // steps, cursor=f"chunk-{step}")
    return {"prompt": prompt, "text": " ".join(chunks)}


@app.task(name="demo.flaky_fetch", bind=True, tracked=True, ttl=timedelta(minutes=5), max_retries=3)
def flaky_fetch(self: Task[Any, Any], name: str, failures: int = 1) -> str:
    """Fails with a transient error ``failures`` times, retrying, then succeeds."""
    try:
        if self.request.retries < failures:
            raise TransientError(f"upstream busy (attempt {self.request.retries + 1})")
    except TransientError as error:
        raise self.retry(exc=error, countdown=0.2) from error
    return f"fetched {name}"


@app.task(
    name="demo.reject_input", bind=True, tracked=True, ttl=timedelta(minutes=5), max_retries=2
)
def reject_input(self: Task[Any, Any], text: str) -> str:
    """Fails for good: bad input is not worth a retry."""
    raise ValueError(f"cannot process {text!r}")


@app.task(name="demo.outlive", bind=True, tracked=True, ttl=timedelta(seconds=2), max_retries=0)
def outlive(self: Task[Any, Any], seconds: float = 4.0) -> str:
    """Outlives its 2 s ttl: the sweep expires it and its late result is refused."""
    for step in range(1, 5):
        time.sleep(seconds / 4)
        report_progress(self, step * 25, cursor=f"step-{step}")
    return "too late"
