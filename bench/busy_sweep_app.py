"""The Celery app ``bench_busy_sweep.py`` runs: a 5 s untracked task that keeps the pool
busy, and a tracked probe with a 2 s ttl that only the sweep (or the worker reaching
its expired message) can end.

Configured from the environment: ``BENCH_REDIS_URL`` (broker, results and book),
``BENCH_NAMESPACE``, ``BENCH_QUEUE`` (the tasks' queue; asyncbook's is
``<it>-asyncbook``), ``BENCH_READY_FILE`` (touched once the worker is ready), and
``BENCH_SCHEDULE=1`` to write the README's ``beat_schedule`` by hand (what an app had to
do before ``install`` put the entries there itself).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from celery import Celery, signals

from asyncbook.celery import install

URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")
QUEUE = os.environ.get("BENCH_QUEUE", "bench-busy")

app = Celery("busy_sweep_app")
app.conf.update(
    broker_url=URL,
    result_backend=URL,
    broker_connection_retry_on_startup=True,
    task_default_queue=QUEUE,
    asyncbook_redis_url=URL,
    asyncbook_namespace=os.environ.get("BENCH_NAMESPACE", "bench-busy"),
    asyncbook_queue=f"{QUEUE}-asyncbook",
)
if os.environ.get("BENCH_SCHEDULE") == "1":
    app.conf.beat_schedule = {
        name: {"task": f"asyncbook.{name}", "schedule": 1.0, "options": {"expires": 5}}
        for name in ("sweep", "deliver")
    }
install(app)


@app.task(name="bench.busy", shared=False)
def busy(seconds: float = 5.0) -> None:
    """Keeps one pool process busy."""
    time.sleep(seconds)


@app.task(name="bench.probe", shared=False, tracked=True, ttl=2)
def probe() -> None:
    """Tracked, 2 s ttl: queued behind the backlog, it expires unrun."""


@signals.worker_ready.connect
def on_worker_ready(**_: Any) -> None:
    ready = os.environ.get("BENCH_READY_FILE")
    if ready:
        Path(ready).touch()
