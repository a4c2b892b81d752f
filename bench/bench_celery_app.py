"""The Celery app the Celery benchmark runs: four no-op tasks, tracked or not.

Configured from the environment by ``bench_celery.py``: ``BENCH_REDIS_URL`` (broker,
results and book), ``BENCH_NAMESPACE``, ``BENCH_READY_FILE`` (touched when the worker
is ready to consume); ``BENCH_BACKEND_URL`` (set by ``bench_backend.py``) overrides the
result backend, ``asyncbook+redis://...`` for asyncbook's own; ``BENCH_BROKER_URL`` (set by
``bench_backend.py --broker``) the broker (default: ``BENCH_REDIS_URL``); ``BENCH_SHARDS`` is
``asyncbook_shards`` (set by ``bench_shards.py``); ``BENCH_TRACING`` (``1`` or ``0``, set by
``bench_tracing.py``) is ``asyncbook_tracing``, spans going to the SDK's batch processor.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from celery import Celery, Task, signals

from asyncbook.celery import install, report_progress

URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")

app = Celery("bench_celery_app")
app.conf.update(
    broker_url=os.environ.get("BENCH_BROKER_URL") or URL,
    result_backend=os.environ.get("BENCH_BACKEND_URL") or URL,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    asyncbook_redis_url=URL,
    asyncbook_namespace=os.environ.get("BENCH_NAMESPACE", "bench"),
)
if os.environ.get("BENCH_SHARDS"):
    app.conf.asyncbook_shards = int(os.environ["BENCH_SHARDS"])
if os.environ.get("BENCH_ONE_RUN"):  # bench_one_run.py: the claim on ("1") or off ("0")
    app.conf.asyncbook_one_run = os.environ["BENCH_ONE_RUN"] == "1"
if os.environ.get("BENCH_FLUSH_DELAY"):
    app.conf.asyncbook_flush_delay = float(os.environ["BENCH_FLUSH_DELAY"])
if os.environ.get("BENCH_TRACING"):  # bench_tracing.py: lifecycle traces on ("1") or off
    import _tracing_sdk

    _tracing_sdk.set_up()
    app.conf.asyncbook_tracing = os.environ["BENCH_TRACING"] == "1"
install(app)


@signals.worker_ready.connect
def on_worker_ready(**_: Any) -> None:
    ready = os.environ.get("BENCH_READY_FILE")
    if ready:
        Path(ready).touch()


@app.task(name="bench.untracked")
def untracked() -> None:
    """A no-op, as Celery runs it."""


@app.task(name="bench.tracked", tracked=True, ttl=3600)
def tracked() -> None:
    """A no-op, tracked by asyncbook."""


@app.task(name="bench.tracked_progress", bind=True, tracked=True, ttl=3600)
def tracked_progress(self: Task[Any, Any]) -> None:
    """A no-op, tracked, reporting progress once."""
    report_progress(self, 50)


@app.task(name="bench.started_update", bind=True, track_started=True)
def started_update(self: Task[Any, Any]) -> None:
    """What users do today: task_track_started plus one update_state for progress."""
    self.update_state(state="PROGRESS", meta={"percent": 50})


@app.task(name="bench.untracked_expires", expires=3600)
def untracked_expires() -> None:
    """A no-op with a message expiry, as tracked tasks get: what the expiry costs Celery."""


@app.task(name="bench.tracked_late", tracked=True, ttl=3600, acks_late=True)
def tracked_late() -> None:
    """A no-op, tracked, acknowledged after it ran (the terminal write is synchronous)."""


@app.task(name="bench.untracked_late", acks_late=True)
def untracked_late() -> None:
    """A no-op acknowledged after it ran."""


@app.task(name="bench.tracked_limited", tracked=True, ttl=3600, limit=1_000_000)
def tracked_limited() -> None:
    """A no-op, tracked, under a name-wide limit it never reaches: every start takes a
    slot with its run's claim (one call), every end frees it (bench_limits.py)."""
