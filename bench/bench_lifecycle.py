"""Lifecycle controls benchmark: what heartbeats cost Redis, how fast a cancel lands.

Run:  .venv/bin/python bench/bench_lifecycle.py [--redis-url URL] [--seconds 20]

Starts a private ``redis-server`` on a free loopback port (unless ``--redis-url``), so
``INFO commandstats`` counts nothing but this benchmark, and removes its keys after.

1. Heartbeats: 1,000 running tracked tasks spread over 4 worker processes (4 Python
   processes, each running the integration's ``Heartbeats`` for 250 task ids against a
   ``RedisBook``, at the real interval); Redis commands counted by ``INFO commandstats``
   deltas over a window. Target: at most one call per process per interval.
2. Cancel: ``book.cancel`` (what ``asyncbook cancel`` calls) on 500 running tasks, one at
   a time; latency until another client reads ``cancelled``. Target: p99 <= 50 ms.
3. Revoke to refusal: the same cancels, timed until a ``CancelWatch`` in another process
   (the worker's main process, in production) has put the task in Celery's revoked set,
   which is what makes a worker refuse to start it. Target: <= 1 s. Measured idle and
   while another process writes ``--load`` changes per second to the same book (every
   change crosses the channel the watch follows).
"""

from __future__ import annotations

import argparse
import multiprocessing
import multiprocessing.synchronize
import os
import platform
import statistics
import sys
import time
import uuid
from multiprocessing.queues import Queue
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _servers import drop_keys, redis_at  # noqa: E402  (a script beside this one)

from asyncbook import ProgressEvent, RedisBook, StartEvent  # noqa: E402
from asyncbook.celery._lifecycle import (  # noqa: E402
    CancelledRing,
    CancelWatch,
    Heartbeats,
    add_to_revoked,
)

TTL_MS = 3_600_000


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def summary(values: list[float]) -> dict[str, float]:
    """p50, p99 and max of ``values`` (seconds), in milliseconds."""
    return {
        "p50_ms": round(statistics.median(values) * 1000, 2),
        "p99_ms": round(percentile(values, 0.99) * 1000, 2),
        "max_ms": round(max(values) * 1000, 2),
    }


def running_tasks(
    book: RedisBook, prefix: str, count: int, heartbeat_timeout_ms: int | None = None
) -> list[str]:
    """``count`` tasks, started, each with three progress events in its history."""
    ids = [f"{prefix}-{index}" for index in range(count)]
    now = book.now_ms()
    for task_id in ids:
        book.create(
            id=task_id,
            now_ms=now,
            ttl_ms=TTL_MS,
            max_attempts=2,
            heartbeat_timeout_ms=heartbeat_timeout_ms,
        )
    for start in range(0, count, 200):
        batch: list[Any] = []
        for task_id in ids[start : start + 200]:
            batch.append((task_id, StartEvent(at_ms=now + 1, worker="bench"), None))
            for step in (1, 2, 3):
                event = ProgressEvent(at_ms=now + 1 + step, progress=step * 10, cursor=str(step))
                batch.append((task_id, event, None))
        book.apply_many(batch, full_task=False)
    return ids


def command_counts(client: redis.Redis) -> dict[str, int]:
    stats: dict[str, Any] = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()}


# -- 1. heartbeats -------------------------------------------------------------------------


class TimedBook(RedisBook):
    """A RedisBook that times its heartbeat round trips."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.durations: list[float] = []
        self.times: list[float] = []

    def heartbeat(self, task_ids: Any) -> int:
        started = time.perf_counter()
        alive = super().heartbeat(task_ids)
        self.durations.append(time.perf_counter() - started)
        self.times.append(started)
        return alive


def beat_process(
    url: str,
    namespace: str,
    ids: list[str],
    interval: float,
    ready: Queue[Any],
    stop: multiprocessing.synchronize.Event,
    results: Queue[Any],
) -> None:
    """One worker process: ``Heartbeats`` for ``ids`` until ``stop``."""
    book = TimedBook.from_url(url, namespace=namespace)
    assert isinstance(book, TimedBook)
    beats = Heartbeats(lambda: book, interval)
    for task_id in ids:
        beats.add(task_id)
    while beats.beats < 1:  # connected, scripts loaded: the steady state begins
        time.sleep(0.01)
    ready.put(os.getpid())
    stop.wait()
    beats.stop()
    periods = [b - a for a, b in zip(book.times, book.times[1:], strict=False)]
    results.put({"beats": beats.beats, "durations": book.durations, "periods": periods})


def bench_heartbeats(
    url: str, namespace: str, tasks: int, processes: int, interval: float, seconds: float
) -> dict[str, Any]:
    book = RedisBook.from_url(url, namespace=namespace)
    timeout_ms = int(3 * interval * 1000)
    ids = running_tasks(book, "beat", tasks, heartbeat_timeout_ms=timeout_ms)
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    ready: Queue[Any] = context.Queue()
    results: Queue[Any] = context.Queue()
    share = tasks // processes
    workers = [
        context.Process(
            target=beat_process,
            args=(url, namespace, ids[n * share : (n + 1) * share], interval, ready, stop, results),
        )
        for n in range(processes)
    ]
    for worker in workers:
        worker.start()
    for _ in workers:  # every process has sent its first heartbeat
        ready.get(timeout=60)
    time.sleep(interval / 2)
    client = redis.Redis.from_url(url)
    before, began = command_counts(client), time.monotonic()
    time.sleep(seconds)
    after, elapsed = command_counts(client), time.monotonic() - began
    overdue = client.zcount(book.keys.stalls, "-inf", book.now_ms())
    stop.set()
    reports = [results.get(timeout=30) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
    delta = {name: after[name] - before.get(name, 0) for name in after}
    delta.pop("info", None)  # this benchmark's own INFO calls
    delta = {name: calls for name, calls in delta.items() if calls}
    calls = delta.get("evalsha", 0) + delta.get("eval", 0)
    per_process_interval = calls / elapsed * interval / processes
    durations = [d for report in reports for d in report["durations"]]
    periods = [p for report in reports for p in report["periods"]]
    return {
        "tasks": tasks,
        "processes": processes,
        "interval_s": interval,
        "window_s": round(elapsed, 2),
        "client_calls_per_s": round(calls / elapsed, 2),
        "calls_per_process_per_interval": round(per_process_interval, 3),
        "period_between_beats_s": {
            "median": round(statistics.median(periods), 4),
            "min": round(min(periods), 4),
        },
        "target": "<= 1",
        "met": per_process_interval <= 1.0 + 1e-9,
        "redis_commands_per_s_incl_script_inner": round(sum(delta.values()) / elapsed, 1),
        "commands_in_window": delta,
        "heartbeat_call": summary(durations),
        "tasks_overdue_after_window": overdue,
    }


# -- 2 and 3. cancel -----------------------------------------------------------------------


class ReadyWatch(CancelWatch):
    """A CancelWatch that says when it is subscribed (its first catch-up is done)."""

    ready: multiprocessing.synchronize.Event | None = None

    def _catch_up(self) -> None:
        super()._catch_up()
        if self.ready is not None:
            self.ready.set()


def watch_process(
    url: str,
    namespace: str,
    ready: multiprocessing.synchronize.Event,
    stop: multiprocessing.synchronize.Event,
    results: Queue[Any],
) -> None:
    """A worker's main process: a CancelWatch whose callback is the integration's (Celery's
    revoked set, then the ring its pool shares); records when each task was revoked."""
    from celery.worker import state

    book = RedisBook.from_url(url, namespace=namespace)
    ring = CancelledRing()
    seen: dict[str, float] = {}

    def revoke(task_id: str) -> None:
        add_to_revoked(task_id)
        ring.add(task_id)
        if task_id in state.revoked and task_id not in seen:
            seen[task_id] = time.time()

    watch = ReadyWatch(book, revoke)
    watch.ready = ready
    follow = watch.follower()
    assert follow is not None  # a RedisBook publishes its cancels
    watch.start(follow)
    stop.wait()
    watch.stop()
    results.put(seen)


def load_process(
    url: str,
    namespace: str,
    rate: int,
    loading: multiprocessing.synchronize.Event,
    stop: multiprocessing.synchronize.Event,
) -> None:
    """Writes ``rate`` progress changes per second to other running tasks of the book."""
    book = RedisBook.from_url(url, namespace=namespace)
    ids = running_tasks(book, f"load-{uuid.uuid4().hex[:6]}", 2000)
    loading.set()
    tick = 0.01
    per_tick = max(1, round(rate * tick))
    step, position = 0, 0
    progress = {task_id: 30 for task_id in ids}
    next_tick = time.monotonic()
    while not stop.is_set():
        batch: list[Any] = []
        at = int(time.time() * 1000)
        for _ in range(per_tick):
            task_id = ids[position]
            position = (position + 1) % len(ids)
            progress[task_id] = min(100, progress[task_id] + 1)
            step += 1
            event = ProgressEvent(at_ms=at, progress=progress[task_id], cursor=str(step))
            batch.append((task_id, event, None))
        book.apply_many(batch, full_task=False)
        next_tick += tick
        time.sleep(max(0.0, next_tick - time.monotonic()))


def bench_cancel(url: str, namespace: str, cancels: int, load: int) -> dict[str, Any]:
    book = RedisBook.from_url(url, namespace=namespace)
    reader = RedisBook.from_url(url, namespace=namespace)  # another client: "readable"
    ids = running_tasks(book, f"cancel-{load}", cancels)
    context = multiprocessing.get_context("spawn")
    ready, loading, stop = context.Event(), context.Event(), context.Event()
    results: Queue[Any] = context.Queue()
    watcher = context.Process(target=watch_process, args=(url, namespace, ready, stop, results))
    watcher.start()
    loader = None
    if load:
        loader = context.Process(target=load_process, args=(url, namespace, load, loading, stop))
        loader.start()
    else:
        loading.set()
    if not ready.wait(30) or not loading.wait(60):
        raise SystemExit("the cancel watch did not subscribe, or the load did not start")
    time.sleep(2.0)  # the load is under way
    client = redis.Redis.from_url(url)
    changes_before = command_counts(client).get("evalsha", 0)
    began = time.monotonic()
    called: dict[str, float] = {}
    call_latency, readable_latency = [], []
    for task_id in ids:
        started = time.time()
        answer = book.cancel(task_id, "bench")
        returned = time.time()
        task = reader.get(task_id)
        readable = time.time()
        assert answer.reason == "cancelled", answer.reason
        if task is None or task.state != "cancelled":
            raise SystemExit(f"{task_id} is not readable as cancelled")
        called[task_id] = started
        call_latency.append(returned - started)
        readable_latency.append(readable - started)
        time.sleep(0.01)
    elapsed = time.monotonic() - began
    changes = command_counts(client).get("evalsha", 0) - changes_before
    time.sleep(1.5)  # let the last ones arrive
    stop.set()
    seen: dict[str, float] = results.get(timeout=30)
    watcher.join(timeout=30)
    if loader is not None:
        loader.join(timeout=30)
    missing = [task_id for task_id in ids if task_id not in seen]
    revoked = [seen[task_id] - called[task_id] for task_id in ids if task_id in seen]
    return {
        "load_changes_per_s_target": load,
        "script_calls_per_s_during_cancels": round(changes / elapsed),
        "cancels": cancels,
        "book_cancel_call": summary(call_latency),
        "cancelled_readable_by_another_client": summary(readable_latency),
        "revoked_in_worker": summary(revoked) if revoked else None,
        "never_revoked": len(missing),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--redis-url", default=None, help="Default: a private redis-server.")
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--cancels", type=int, default=500)
    parser.add_argument("--load", type=int, default=1000, help="Changes/s in the loaded run.")
    options = parser.parse_args()

    with redis_at(options.redis_url) as url:
        run(options, url)


def run(options: argparse.Namespace, url: str) -> None:
    client = redis.Redis.from_url(url)
    namespace = f"bench-lifecycle-{uuid.uuid4().hex[:8]}"
    try:
        load = os.getloadavg()
        print(f"# {platform.python_version()}, Redis {client.info()['redis_version']}, ")
        print(f"# {os.cpu_count()} cores, load average {load[0]:.2f} at start")
        print("heartbeats:")
        beats = bench_heartbeats(
            url, namespace, options.tasks, options.processes, options.interval, options.seconds
        )
        for key, value in beats.items():
            print(f"  {key}: {value}")
        for rate in (0, options.load):
            print(f"cancel (background load {rate} changes/s):")
            result = bench_cancel(url, namespace, options.cancels, rate)
            for key, value in result.items():
                print(f"  {key}: {value}")
        print(f"# load average {os.getloadavg()[0]:.2f} at the end")
    finally:
        drop_keys(client, "{" + namespace + "}:*")


if __name__ == "__main__":
    main()
