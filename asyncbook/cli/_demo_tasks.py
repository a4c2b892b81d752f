"""The demo's four example tasks, registered on a given app (``add_demo_tasks``): one
succeeds with progress, one retries, one fails, one is late. They are named ``demo.*``
(asyncbook never tracks a task named ``asyncbook.*``). Importing this module creates no
app: the package's demo app (``_demo_app``) and a checkout's ``workers/`` app each
register them on themselves.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any, NamedTuple

from celery import Celery, Task

from ..celery import report_progress

__all__ = ["DemoTasks", "TransientError", "add_demo_tasks"]


class TransientError(ConnectionError):
    """An upstream hiccup worth retrying."""


class DemoTasks(NamedTuple):
    """The four example tasks, as registered on one app."""

    generate: Task[Any, Any]
    flaky_fetch: Task[Any, Any]
    reject_input: Task[Any, Any]
    outlive: Task[Any, Any]


def add_demo_tasks(app: Celery) -> DemoTasks:
    """Register the four example tasks (``demo.*``) on ``app``, and only there."""

    @app.task(
        name="demo.generate", bind=True, tracked=True, ttl=timedelta(minutes=30), max_retries=2,
        shared=False,
    )  # fmt: skip
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

    @app.task(
        name="demo.flaky_fetch", bind=True, tracked=True, ttl=timedelta(minutes=5), max_retries=3,
        shared=False,
    )  # fmt: skip
    def flaky_fetch(self: Task[Any, Any], name: str, failures: int = 1) -> str:
        """Fails with a transient error ``failures`` times, retrying, then succeeds."""
        try:
            if self.request.retries < failures:
                raise TransientError(f"upstream busy (attempt {self.request.retries + 1})")
        except TransientError as error:
            raise self.retry(exc=error, countdown=0.2) from error
        return f"fetched {name}"

    @app.task(
        name="demo.reject_input", bind=True, tracked=True, ttl=timedelta(minutes=5),
        max_retries=2, shared=False,
    )  # fmt: skip
    def reject_input(self: Task[Any, Any], text: str) -> str:
        """Fails for good: bad input is not worth a retry."""
        raise ValueError(f"cannot process {text!r}")

    @app.task(
        name="demo.outlive", bind=True, tracked=True, ttl=timedelta(seconds=2), max_retries=0,
        shared=False,
    )  # fmt: skip
    def outlive(self: Task[Any, Any], seconds: float = 4.0) -> str:
        """Outlives its 2 s ttl: the sweep expires it and its late result is refused."""
        for step in range(1, 5):
            time.sleep(seconds / 4)
            report_progress(self, step * 25, cursor=f"step-{step}")
        return "too late"

    return DemoTasks(generate, flaky_fetch, reject_input, outlive)
