"""The lifecycle tests' tracked tasks, beside the demo's four (``asyncbook.cli._demo_tasks``,
on this app in ``.main``: one succeeds with progress, one retries, one fails, one is late):
three show the lifecycle controls (cancel, heartbeats, checkpoints), one fails with an
error of asyncbook's own, and one streams its output (``stream_tokens``)."""

from __future__ import annotations

import hashlib
import json
import time
from datetime import timedelta
from typing import Any

from celery import Task
from celery.backends.redis import RedisBackend

from asyncbook.celery import last_cursor, report_output, report_progress

from .main import app, flaky_fetch, generate, outlive, reject_input

__all__ = [
    "flaky_fetch",
    "render",
    "generate",
    "hold",
    "outlive",
    "overreport",
    "reject_input",
    "run_twice",
    "stream_tokens",
    "tenant_job",
    "touch",
    "transcribe",
]


# Lifecycle examples (cancel, heartbeats, checkpoints). Each writes what its body did to
# the list ``log_key`` in the result backend's Redis, so a test can see which chunks ran.


def _log(task: Task[Any, Any], log_key: str, entry: str) -> None:
    backend = task.backend
    if log_key and isinstance(backend, RedisBackend):  # the demo config: results in Redis
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
def render(self: Task[Any, Any], size: int, seed: int = 0, delay: float = 0.0) -> bytes:
    """``size`` bytes of output (a rendered image, say), the same for the same ``seed``,
    after ``delay`` seconds of work: stored by reference when ``asyncbook_artifacts`` is
    set (docs/artifacts.md)."""
    time.sleep(delay)
    block = hashlib.sha256(f"{seed}".encode()).digest()
    return (block * (size // len(block) + 1))[:size]


@app.task(bind=True, tracked=True, ttl=timedelta(minutes=5), max_retries=0)
def overreport(self: Task[Any, Any]) -> None:
    """Reports progress past 100: ``report_progress`` raises ``AsyncBookError``, and the
    task fails with it (it reaches the result backend as itself)."""
    report_progress(self, 150)


@app.task(bind=True, tracked=True, ttl=timedelta(minutes=5), max_retries=0)
def run_twice(self: Task[Any, Any], log_key: str, *args: Any, **kwargs: Any) -> int:
    """Writes what it was sent (its args, kwargs and queue, as JSON) to ``log_key``; the
    first run fails, so that a retry of it runs again and succeeds."""
    queue = (self.request.delivery_info or {}).get("routing_key")
    entry = json.dumps({"args": args, "kwargs": kwargs, "queue": queue, "id": self.request.id})
    _log(self, log_key, entry)
    backend = self.backend
    if isinstance(backend, RedisBackend) and backend.client.llen(log_key) == 1:
        raise ValueError("the first run fails")
    return len(args)


@app.task(bind=True, tracked=True, ttl=timedelta(minutes=5), max_retries=1)
def stream_tokens(
    self: Task[Any, Any], tokens: int = 40, delay: float = 0.02, retry_after: int = 0
) -> int:
    """Streams ``tokens`` tokens (``report_output``), one every ``delay`` seconds, as a
    model generating text would; with ``retry_after``, its first attempt asks for a retry
    after that many tokens and the second streams all of them (each chunk names its
    attempt)."""
    attempt = int(self.request.retries or 0)
    for n in range(tokens):
        if retry_after and attempt == 0 and n == retry_after:
            raise self.retry(countdown=0.2)
        report_output(self, f"{attempt}:{n} ")
        time.sleep(delay)
    return tokens


def _tenant(*_: Any, **kwargs: Any) -> str:
    return str(kwargs["tenant"])


@app.task(tracked=True, ttl=timedelta(minutes=5), limit=2, concurrency_key=_tenant)
def tenant_job(tenant: str, seconds: float) -> str:
    """At most two of one tenant run at a time, across every worker (docs/limits.md)."""
    time.sleep(seconds)
    return tenant
