"""The Celery app of ``failover.py``: one tracked task that reports progress.

Configured from the environment by ``failover.py`` (the worker's): ``FAILOVER_BROKER_URL``
(broker and Celery's results: the main Redis, which stays up), ``FAILOVER_BOOK_URL`` (the
book: a ``redis+cluster://`` URL of the cluster the script fails over),
``FAILOVER_NAMESPACE``, ``FAILOVER_QUEUE``, ``FAILOVER_WAIT_REPLICAS``, ``FAILOVER_SHARDS`` and
``FAILOVER_READY_FILE`` (touched when the worker consumes). ``make_app`` builds the same
app for the script's own publishers.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from celery import Celery, Task, signals

from asyncbook.celery import install, report_progress

BROKER = os.environ.get("FAILOVER_BROKER_URL", "redis://127.0.0.1:6379/14")


def make_app(
    book_url: str,
    namespace: str,
    queue: str,
    wait_replicas: int,
    shards: int | None = None,
    broker: str = BROKER,
) -> Celery:
    """The app, installed on the book at ``book_url`` (one tracked task, ``failover.work``);
    ``shards`` defaults to ``FAILOVER_SHARDS`` (1 without it)."""
    if shards is None:
        shards = int(os.environ.get("FAILOVER_SHARDS", "1"))
    app = Celery(f"failover-{namespace}", set_as_current=False)
    app.conf.update(
        broker_url=broker,
        result_backend=broker,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        task_default_queue=queue,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=4,
        asyncbook_redis_url=book_url,
        asyncbook_namespace=namespace,
        asyncbook_queue=queue,
        asyncbook_wait_replicas=wait_replicas,
        asyncbook_shards=shards,
        asyncbook_wait_timeout_ms=500,
        asyncbook_retry_for=30.0,
        asyncbook_flush_delay=0.0,
    )

    @app.task(name="failover.work", bind=True, shared=False, tracked=True, ttl=600)
    def work(self: Task[Any, Any], steps: int, delay: float) -> str:
        """``steps`` chunks of ``delay`` seconds, reporting progress after each."""
        for step in range(1, steps + 1):
            time.sleep(delay)
            report_progress(self, step * 100 // steps, cursor=f"chunk-{step}")
        return "done"

    install(app)
    return app


app = make_app(
    os.environ.get("FAILOVER_BOOK_URL", "redis+cluster://127.0.0.1:7000"),
    os.environ.get("FAILOVER_NAMESPACE", "failover"),
    os.environ.get("FAILOVER_QUEUE", "failover"),
    int(os.environ.get("FAILOVER_WAIT_REPLICAS", "0")),
)


@signals.worker_ready.connect
def on_worker_ready(**_: Any) -> None:
    ready = os.environ.get("FAILOVER_READY_FILE")
    if ready:
        Path(ready).touch()
