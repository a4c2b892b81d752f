"""Revoke benchmark: how soon a revoked or cancelled queued task reads ``cancelled``.

Run:  .venv/bin/python bench/bench_revoke.py [--redis-url URL] [--tasks 600]

Starts a private ``redis-server`` on a free loopback port (unless ``--redis-url``): the
Celery broker and the book. Publishes ``--tasks`` tracked tasks to a queue no worker
consumes (the backlog case: a revoke cannot wait for a worker to see the message), then
ends each, interleaved one by one, in one of three ways:

- ``app.control.revoke(id)`` with asyncbook installed (its Control cancels in the book);
- ``asyncbook.celery.cancel(app, id)``;
- Celery's plain ``Control.broadcast("revoke")``: what ``revoke`` did before, as a baseline.

Measured: how long the call takes, and the time from the call until another client's
``book.get`` reads ``cancelled`` (given up after 250 ms: "never"). Target: readable p99 at
most 100 ms, and readable at the first read after the call returns.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import redis
from celery import Celery
from celery.app.control import Control

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _servers import drop_keys, redis_at  # noqa: E402  (scripts beside this one)
from bench_lifecycle import summary  # noqa: E402

from asyncbook import RedisBook  # noqa: E402
from asyncbook.celery import cancel, install, uninstall  # noqa: E402

GIVE_UP_S = 0.25


def plain_revoke(app: Celery, task_id: str) -> None:
    """Celery's own revoke, without asyncbook's Control (the behaviour before)."""
    arguments = {"task_id": task_id, "terminate": False, "signal": "SIGTERM"}
    Control.broadcast(app.control, "revoke", arguments=arguments)


def readable_after(reader: RedisBook, task_id: str, started: float) -> tuple[float | None, bool]:
    """Seconds from ``started`` until ``reader`` reads the task cancelled (None: not within
    GIVE_UP_S), and whether the first read already did."""
    first = True
    while True:
        task = reader.get(task_id)
        now = time.perf_counter()
        if task is not None and task.state.value == "cancelled":
            return now - started, first
        if now - started > GIVE_UP_S:
            return None, False
        first = False
        time.sleep(0.001)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-url", default=None)
    parser.add_argument("--tasks", type=int, default=600)
    options = parser.parse_args()
    with redis_at(options.redis_url) as url:
        run(options.tasks, url)


def run(tasks: int, url: str) -> None:
    namespace = f"bench-revoke-{uuid.uuid4().hex[:8]}"
    queue = f"nobody-{uuid.uuid4().hex[:8]}"
    app = Celery("bench_revoke", broker=url, backend=None, set_as_current=False)
    app.conf.update(
        task_default_queue=queue,
        asyncbook_redis_url=url,
        asyncbook_namespace=namespace,
        broker_connection_retry_on_startup=True,
    )

    @app.task(tracked=True, ttl=3600)
    def job() -> None: ...

    install(app)
    reader = RedisBook.from_url(url, namespace=namespace)
    ways: dict[str, Any] = {
        "app.control.revoke(id)": lambda task_id: app.control.revoke(task_id),
        "cancel(app, id)": lambda task_id: cancel(app, task_id),
        "Celery's revoke alone (before)": lambda task_id: plain_revoke(app, task_id),
    }
    calls: dict[str, list[float]] = {name: [] for name in ways}
    readable: dict[str, list[float]] = {name: [] for name in ways}
    at_return: dict[str, int] = dict.fromkeys(ways, 0)
    never: dict[str, int] = dict.fromkeys(ways, 0)
    names = list(ways)
    try:
        for index in range(tasks):
            name = names[index % len(names)]
            task_id = job.delay().id
            started = time.perf_counter()
            ways[name](task_id)
            calls[name].append(time.perf_counter() - started)
            took, first = readable_after(reader, task_id, started)
            if took is None:
                never[name] += 1
            else:
                readable[name].append(took)
                at_return[name] += first
        report = {
            "machine": f"{platform.node()} Python {platform.python_version()}",
            "redis": redis.Redis.from_url(url).info("server")["redis_version"],
            "tasks_per_way": tasks // len(names),
            "ways": {
                name: {
                    "call": summary(calls[name]),
                    "readable": summary(readable[name]) if readable[name] else None,
                    "readable_at_first_read": at_return[name],
                    "never_within_250ms": never[name],
                    "call_mean_ms": round(statistics.mean(calls[name]) * 1000, 2),
                }
                for name in names
            },
        }
        print(json.dumps(report, indent=2))
    finally:
        uninstall(app)
        client = redis.Redis.from_url(url)
        drop_keys(client, f"{{{namespace}}}*")
        client.delete(queue)
        client.close()


if __name__ == "__main__":
    main()
