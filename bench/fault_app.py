"""The Celery app the fault suite runs: one tracked task that reports progress as it works.

Configured from the environment by ``fault_suite.py``: ``FAULT_BROKER_URL`` (broker and
Celery's results: stays up), ``FAULT_BOOK_URL`` (the book: the Redis the suite breaks),
``FAULT_NAMESPACE``, ``FAULT_QUEUE`` and ``FAULT_READY_FILE`` (touched when the worker
consumes).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from celery import Celery, Task, signals

from asyncbook.celery import install, report_progress

BROKER = os.environ.get("FAULT_BROKER_URL", "redis://127.0.0.1:6379/14")
QUEUE = os.environ.get("FAULT_QUEUE", "faults")

app = Celery("fault_app")
app.conf.update(
    broker_url=BROKER,
    result_backend=BROKER,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    task_default_queue=QUEUE,
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    asyncbook_redis_url=os.environ.get("FAULT_BOOK_URL", "redis://127.0.0.1:6390/0"),
    asyncbook_namespace=os.environ.get("FAULT_NAMESPACE", "faults"),
    asyncbook_queue=QUEUE,
)
install(app)


@signals.worker_ready.connect
def on_worker_ready(**_: Any) -> None:
    ready = os.environ.get("FAULT_READY_FILE")
    if ready:
        Path(ready).touch()


@app.task(name="fault.work", bind=True, tracked=True, ttl=600)
def work(self: Task[Any, Any], steps: int, delay: float) -> str:
    """``steps`` chunks of ``delay`` seconds, reporting progress after each."""
    for step in range(1, steps + 1):
        time.sleep(delay)
        report_progress(self, step * 100 // steps, cursor=f"chunk-{step}")
    return f"done {self.request.id}"
