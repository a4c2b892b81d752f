"""Example tracked tasks: one succeeds with progress, one retries, one fails, one is late;
three more show the lifecycle controls (cancel, heartbeats, checkpoints), and one fails
with an error of asyncbook's own."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from celery import Task
from celery.backends.redis import RedisBackend

from asyncbook.celery import last_cursor, report_progress

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


# Lifecycle examples (cancel, heartbeats, checkpoints). Each writes what its body did to
# the list ``log_key`` in the result backend's Redis, so a test can see which chunks ran.


def _log(task: Task[Any, Any], log_key: str, entry: str) -> None:
    backend = task.backend
    if log_key and isinstance(backend, RedisBackend):  # celeryconfig: results in Redis
        backend.client.rpush(log_key, entry)


@app.task(bind=True, tracked=True, ttl=timedelta(minutes=5), max_retries=2)
def transcribe(
    self: Task[Any, Any], chunks: int = 20, delay: float = 0.2, log_key: str = ""
) -> dict[str, int]:
    """Chunked work with checkpoints: resumes after the cursor an earlier attempt reported
    (``last_cursor``), and stops between chunks once cancelled (``report_progress``
    raises ``TaskCancelled``)."""
    first = int(last_cursor(self) or 0)
    _log(self, log_key, f"resume:{first}")
    for chunk in range(first, chunks):
        _log(self, log_key, f"chunk:{chunk}")
        time.sleep(delay)  # one chunk of work
        report_progress(self, (chunk + 1) * 100 // chunks, cursor=str(chunk + 1))
    return {"chunks": chunks, "resumed_from": first}


@app.task(bind=True, tracked=True, ttl=timedelta(minutes=5), max_retries=1)
def touch(self: Task[Any, Any], log_key: str, retry_after: float = 0.0) -> int:
    """Appends its attempt number to ``log_key``; with ``retry_after``, its first attempt
    asks for a retry that many seconds later."""
    retries = int(self.request.retries or 0)
    _log(self, log_key, str(retries))
    if retry_after and retries == 0:
        raise self.retry(countdown=retry_after)
    return retries


@app.task(bind=True, tracked=True, ttl=timedelta(minutes=5), acks_late=False)
def hold(self: Task[Any, Any], seconds: float = 30.0) -> str:
    """Works ``seconds`` without a progress report, acknowledged early (Celery's
    default): only heartbeats show it is alive. If its worker dies, its message is gone
    and the sweep fails it as stalled once the heartbeats stop."""
    time.sleep(seconds)
    return "held"


@app.task(bind=True, tracked=True, ttl=timedelta(minutes=5), max_retries=0)
def overreport(self: Task[Any, Any]) -> None:
    """Reports progress past 100: ``report_progress`` raises ``AsyncBookError``, and the
    task fails with it (it reaches the result backend as itself)."""
    report_progress(self, 150)
