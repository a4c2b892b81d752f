"""Example tracked tasks: one succeeds with progress, one retries, one fails, one is late."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from celery import Task

from asyncbook.celery import report_progress

from .main import app


class TransientError(ConnectionError):
    """An upstream hiccup worth retrying."""


@app.task(bind=True, tracked=True, ttl=timedelta(minutes=30), max_retries=2)
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


@app.task(bind=True, tracked=True, ttl=timedelta(minutes=5), max_retries=3)
def flaky_fetch(self: Task[Any, Any], name: str, failures: int = 1) -> str:
    """Fails with a transient error ``failures`` times, retrying, then succeeds."""
    try:
        if self.request.retries < failures:
            raise TransientError(f"upstream busy (attempt {self.request.retries + 1})")
    except TransientError as error:
        raise self.retry(exc=error, countdown=0.2) from error
    return f"fetched {name}"


@app.task(bind=True, tracked=True, ttl=timedelta(minutes=5), max_retries=2)
def reject_input(self: Task[Any, Any], text: str) -> str:
    """Fails for good: bad input is not worth a retry."""
    raise ValueError(f"cannot process {text!r}")


@app.task(bind=True, tracked=True, ttl=timedelta(seconds=2), max_retries=0)
def outlive(self: Task[Any, Any], seconds: float = 4.0) -> str:
    """Outlives its 2 s ttl: the sweep expires it and its late result is refused."""
    for step in range(1, 5):
        time.sleep(seconds / 4)
        report_progress(self, step * 25, cursor=f"step-{step}")
    return "too late"
