"""Expiry sweep benchmark: bulk expiry time, and expiry lateness under beat.

Run:  .venv/bin/python bench/bench_sweep.py [--url redis://127.0.0.1:6379/13] [--live 0]

1. Bulk: ``--tasks`` (100,000) tasks already past their deadline; one ``sweep`` call
   (the body of ``asyncbook.sweep``) expires them all. Target: <= 10 s. Repeated
   ``--rounds`` times.
2. Lateness: a real ``celery -A workers worker -B`` (beat runs ``asyncbook.sweep``
   every second, as ``install`` puts it on the schedule; the worker's own thread sweeps
   too) while ``--live`` tasks reach their
   deadlines over ~15 s. Lateness = when the expiry notification was written (its
   stream entry id is a Redis timestamp) minus the deadline. Target: p99 <= 1.5 s.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import redis

from asyncbook import RedisBook, sweep
from asyncbook.celery._tracking import now_ms

ROOT = Path(__file__).resolve().parent.parent


def wipe(book: RedisBook) -> None:
    keys = list(book.client.scan_iter(match="{" + book.namespace + "}:*", count=5000))
    for start in range(0, len(keys), 1000):
        book.client.delete(*keys[start : start + 1000])


def create_many(book: RedisBook, deadlines: list[int], now: int) -> list[str]:
    ids = [f"bench-{i:06d}-{uuid.uuid4().hex[:6]}" for i in range(len(deadlines))]

    def create(index: int) -> None:
        ttl = max(1, deadlines[index] - now)
        book.create(id=ids[index], now_ms=deadlines[index] - ttl, ttl_ms=ttl, max_attempts=1)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, range(len(ids)), chunksize=500))
    return ids


def redis_cpu(book: RedisBook) -> float:
    """The Redis server's CPU seconds so far (all its clients': use a private server)."""
    cpu = book.client.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def bench_bulk(url: str, count: int, rounds: int) -> None:
    times: list[float] = []
    for round_ in range(1, rounds + 1):
        book = RedisBook.from_url(url, namespace=f"bench-sweep-{uuid.uuid4().hex[:8]}")
        try:
            now = now_ms()
            create_many(book, [now - 60_000 + i % 1000 for i in range(count)], now)
            server = redis_cpu(book)
            started, client = time.perf_counter(), time.process_time()
            report = sweep(book, now_ms(), batch=1000)
            elapsed = time.perf_counter() - started
            client, server = time.process_time() - client, redis_cpu(book) - server
            assert report.expired == count, report
            assert not book.overdue(now_ms())
            times.append(elapsed)
            print(
                f"round {round_}: {count} overdue tasks expired in {elapsed:.2f} s "
                f"({count / elapsed:,.0f}/s, {report.batches} round trips; CPU: client "
                f"{client:.2f} s, Redis {server:.2f} s; load {os.getloadavg()[0]:.1f})",
                flush=True,
            )
        finally:
            wipe(book)
    print(f"bulk sweep of {count}: median {statistics.median(times):.2f} s, max {max(times):.2f} s")


def bench_lateness(url: str, count: int, spread_s: float) -> None:
    namespace = f"bench-late-{uuid.uuid4().hex[:8]}"
    queue = f"bench-late-{uuid.uuid4().hex[:8]}"
    book = RedisBook.from_url(url, namespace=namespace)
    env = {
        **os.environ,
        "REDIS_URL": url,
        "ASYNCBOOK_NAMESPACE": namespace,
        "ASYNCBOOK_QUEUE": queue,
        "PYTHONPATH": str(ROOT),
    }
    env.pop("ASYNCBOOK_WEBHOOK_URL", None)
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "worker.log"
        command = [
            sys.executable, "-m", "celery", "-A", "workers", "worker", "-B",
            "-s", str(Path(tmp) / "beat"), "--pool=solo", "-n", f"{queue}@localhost",
            "--without-gossip", "--without-mingle", "-l", "info",
        ]  # fmt: skip
        with log.open("wb") as out:
            worker = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=out)
        try:
            # Beat starts after the worker: measure from its first sweep on.
            while b"asyncbook.sweep" not in log.read_bytes():
                if worker.poll() is not None:
                    raise SystemExit(log.read_text())
                time.sleep(0.05)
            now = now_ms()
            deadlines = sorted(
                now + 2_000 + int(random.random() * spread_s * 1000) for _ in range(count)
            )
            ids = create_many(book, deadlines, now)
            due = dict(zip(ids, deadlines, strict=True))
            lateness: list[float] = []
            end = time.monotonic() + spread_s + 10
            while len(lateness) < count and time.monotonic() < end:
                for entry_id, note in book.consume_notifications("bench", "bench", 1000, 500):
                    written_ms = int(entry_id.split("-", 1)[0])
                    lateness.append((written_ms - due[note.task_id]) / 1000)
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=30)
            wipe(book)
            for key in book.client.scan_iter(match=f"*{queue}*"):
                book.client.delete(key)
    lateness.sort()
    p50 = lateness[len(lateness) // 2]
    p99 = lateness[min(len(lateness) - 1, int(len(lateness) * 0.99))]
    print(
        f"lateness of {len(lateness)}/{count} expiries under beat (1 s sweep): "
        f"p50 {p50:.3f} s, p99 {p99:.3f} s, max {lateness[-1]:.3f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="redis://127.0.0.1:6379/13")
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--live", type=int, default=3000)
    parser.add_argument("--spread", type=float, default=15.0, help="seconds of deadlines")
    args = parser.parse_args()
    redis.Redis.from_url(args.url).ping()
    if args.rounds:
        bench_bulk(args.url, args.tasks, args.rounds)
    if args.live:  # --live 0: the bulk sweep alone, no Celery worker
        bench_lateness(args.url, args.live, args.spread)


if __name__ == "__main__":
    main()
