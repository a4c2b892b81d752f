"""A Celery app whose book lives on a Redis of its own (``tests/celery/test_outage.py``).

The broker and asyncbook's result backend are on ``REDIS_URL``; the book
(``asyncbook_redis_url``) is on ``OUTAGE_BOOK_URL``, a server the test stops and starts
again. ``CeleryWorker(app="tests.support.outage_app")`` runs it; a publisher script
imports it and calls ``add.delay``. ``OUTAGE_RETRY_FOR`` sets ``asyncbook_retry_for``,
``OUTAGE_DEFER_CREATES`` (``1`` or ``0``) ``asyncbook_defer_creates``.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from celery import Celery, Task

from asyncbook.celery import install, report_progress

__all__ = ["add", "app"]

_BROKER = os.environ["REDIS_URL"]

app = Celery("outage", broker=_BROKER, backend=f"asyncbook+{_BROKER}", set_as_current=True)
app.conf.update(
    task_default_queue=os.environ["ASYNCBOOK_QUEUE"],
    broker_connection_retry_on_startup=True,
    asyncbook_redis_url=os.environ["OUTAGE_BOOK_URL"],
    asyncbook_namespace=os.environ["ASYNCBOOK_NAMESPACE"],
    asyncbook_retry_for=float(os.environ.get("OUTAGE_RETRY_FOR", "10")),
    asyncbook_defer_creates=os.environ.get("OUTAGE_DEFER_CREATES", "1") == "1",
)
install(app)


@app.task(name="outage.add", bind=True, tracked=True, ttl=timedelta(minutes=10), max_retries=2)
def add(self: Task[Any, Any], a: int, b: int) -> int:
    """Reports progress twice, then returns ``a + b``."""
    report_progress(self, 50, cursor="half")
    report_progress(self, 100, cursor="done")
    return a + b
