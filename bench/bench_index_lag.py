"""The console index's lag under a tracked Celery load (issue 32: p99 <= 1 s at 500 tasks/s).

Run:  PYTHONPATH=. .venv/bin/python bench/bench_index_lag.py [--rate 500] [--seconds 20]
      [--pool solo|prefork] [--concurrency 2] [--page-every 0] [--url redis://...]

Without ``--url`` it starts a throwaway ``redis-server`` on a free loopback port (broker,
results and book). A real Celery worker of ``bench_celery_app`` (asyncbook installed, so
its upkeep thread ``asyncbook-index`` runs the indexer 4 times a second) runs the tracked
no-op ``bench.tracked``; this process publishes it at a steady ``--rate`` for
``--seconds`` (each publish due at ``start + i / rate``: a late one does not push the
others back), while a sampler thread reads every 50 ms:

- the index's lag, ``book.catch_up_index(batches=0)``: the changes not yet indexed and the
  age (the server's clock) of the oldest, as ``indexLag`` says it, but without a read's own
  catch-up, so the figure is the worker's indexer alone (0 when caught up);
- the broker queue's length (published but not yet taken by the worker).

A page of the console (``GET /api/tasks``, ``asyncbook ls``) catches up first, up to
``READ_BATCHES`` x ``BATCH`` changes, and reports what stayed behind: ``--page-every S``
also reads one ``book.search`` page every S seconds and reports its ``indexLag`` and
time (those reads index too, so they shorten the lag sampled).

Prints the lag's p50/p95/p99/max over the publishing window, the tasks/s published and
finished, the worker's CPU and the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import redis

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from _servers import redis_at  # noqa: E402  (a module beside this one)

SAMPLE_EVERY = 0.05
"""Seconds between two samples of the lag."""


@dataclass
class Sample:
    """One reading: when (seconds since publishing began), the lag, the broker's queue,
    the tasks published by then."""

    at: float
    entries: int
    age_ms: int
    queued: int
    published: int


@dataclass
class Sampler:
    """Reads the lag every ``SAMPLE_EVERY`` s in a thread (on a schedule), until stopped."""

    url: str
    namespace: str
    queue: str
    began: float
    page_every: float = 0.0
    published: int = 0
    """Tasks published so far (the publisher counts)."""
    samples: list[Sample] = field(default_factory=list)
    pages: list[tuple[float, int, int, float]] = field(default_factory=list)
    """Console pages read: (at, entries, age_ms, ms the read took)."""
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        from asyncbook import RedisBook
        from asyncbook._console import TaskQuery

        client = redis.Redis.from_url(self.url)
        book = RedisBook(client, namespace=self.namespace)
        due = next_page = time.perf_counter()
        while not self.stop.wait(max(0.0, due - time.perf_counter())):
            now = time.perf_counter()
            if self.page_every and now >= next_page:
                page = book.search(TaskQuery(limit=50))
                took = (time.perf_counter() - now) * 1000
                lag = page.index_lag
                self.pages.append((now - self.began, lag.entries, lag.oldest_age_ms or 0, took))
                next_page += self.page_every
            lag = book.catch_up_index(batches=0)
            published = self.published
            queued = int(client.llen(self.queue))
            at = time.perf_counter() - self.began
            self.samples.append(Sample(at, lag.entries, lag.oldest_age_ms or 0, queued, published))
            due = max(due + SAMPLE_EVERY, time.perf_counter())
        client.close()


def process_cpu(pid: int) -> float:
    """CPU seconds of a process and its children so far (Linux ``/proc``)."""
    total = 0.0
    children = Path(f"/proc/{pid}/task/{pid}/children")
    pids = [pid, *map(int, children.read_text().split())] if children.exists() else [pid]
    for each in pids:
        try:
            fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


@contextmanager
def worker(
    env: dict[str, str], queue: str, pool: str, concurrency: int
) -> Iterator[subprocess.Popen[bytes]]:
    """A Celery worker of ``bench_celery_app`` on ``queue``, ready to consume."""
    with tempfile.TemporaryDirectory() as tmp:
        ready = Path(tmp) / "ready"
        command = [
            sys.executable, "-m", "celery", "-A", "bench_celery_app", "worker",
            f"--pool={pool}", "-Q", queue, "-l", "warning", "-n", f"{queue}@localhost",
            "--without-gossip", "--without-mingle", "--without-heartbeat",
        ]  # fmt: skip
        if pool == "prefork":
            command.append(f"--concurrency={concurrency}")
        process = subprocess.Popen(
            command, cwd=HERE, env={**env, "BENCH_READY_FILE": str(ready)},
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            while not ready.exists():
                if process.poll() is not None:
                    raise SystemExit("the worker exited")
                time.sleep(0.01)
            yield process
        finally:
            process.terminate()
            process.wait(timeout=30)


def percentile(values: list[float], share: float) -> float:
    """The nearest-rank percentile (``share`` in 0..1) of a non-empty list."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * len(ordered)) - 1))]


def finished(client: redis.Redis, ids: list[str]) -> int:
    """How many of ``ids`` have a Celery result."""
    done = 0
    for start in range(0, len(ids), 2000):
        with client.pipeline(transaction=False) as pipe:
            for task_id in ids[start : start + 2000]:
                pipe.exists(f"celery-task-meta-{task_id}")
            done += sum(pipe.execute())
    return done


def run(args: argparse.Namespace, url: str) -> None:
    namespace, queue = f"bench-lag-{uuid.uuid4().hex[:8]}", f"lag-{uuid.uuid4().hex[:8]}"
    os.environ.update({"BENCH_REDIS_URL": url, "BENCH_NAMESPACE": namespace})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE)])}
    import bench_celery_app

    task = bench_celery_app.app.tasks["bench.tracked"]
    client = redis.Redis.from_url(url)
    with worker(env, queue, args.pool, args.concurrency) as process:
        warm = [task.apply_async(queue=queue).id for _ in range(200)]
        while finished(client, warm[-1:]) == 0:
            time.sleep(0.05)
        load_before = os.getloadavg()
        total = int(args.rate * args.seconds)
        ids: list[str] = []
        began = time.perf_counter()
        sampler = Sampler(url, namespace, queue, began, args.page_every)
        thread = threading.Thread(target=sampler.run, name="lag-sampler", daemon=True)
        thread.start()
        cpu = process_cpu(process.pid)
        late = 0.0
        for i in range(total):
            due = began + i / args.rate
            wait = due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            else:
                late = max(late, -wait)
            ids.append(task.apply_async(queue=queue).id)
            sampler.published = i + 1
        window = time.perf_counter() - began
        worker_cpu = process_cpu(process.pid) - cpu
        load_after = os.getloadavg()
        done_in_window = finished(client, ids)
        while finished(client, ids[-1:]) == 0:
            if time.perf_counter() - began > window + 600:
                raise SystemExit("the last task did not finish within 600 s")
            time.sleep(0.05)
        drained = time.perf_counter() - began
        while (
            not sampler.samples or sampler.samples[-1].entries or sampler.samples[-1].at < drained
        ):
            if time.perf_counter() - began > drained + 120:
                raise SystemExit("the index did not catch up within 120 s")
            time.sleep(0.05)
        sampler.stop.set()
        thread.join()
    client.close()
    report(args, sampler, window, drained, total, done_in_window, worker_cpu, late)
    print(f"load average (1, 5, 15 min): before {fmt_load(load_before)}, "
          f"at the window's end {fmt_load(load_after)} ({os.cpu_count()} CPUs)")  # fmt: skip


def fmt_load(load: tuple[float, float, float]) -> str:
    return " ".join(f"{value:.2f}" for value in load)


def report(
    args: argparse.Namespace,
    sampler: Sampler,
    window: float,
    drained: float,
    total: int,
    done_in_window: int,
    worker_cpu: float,
    late: float,
) -> None:
    inside = [s for s in sampler.samples if s.at <= window]
    after = [s for s in sampler.samples if s.at > window]
    ages = [s.age_ms / 1000 for s in inside]
    steady = [s for s in inside if s.at >= min(5.0, window / 4)]
    first, last = steady[0], steady[-1]
    # taken by the worker = published - still queued
    took = (last.published - first.published) - (last.queued - first.queued)
    taken = (last.at - first.at) or 1.0
    print(f"rate {args.rate:g}/s for {args.seconds:g} s, {args.pool} worker"
          + (f" x{args.concurrency}" if args.pool == "prefork" else ""))  # fmt: skip
    print(f"published {total:,} in {window:.2f} s: {total / window:.0f} tasks/s "
          f"(latest publish {late * 1000:.0f} ms behind schedule)")  # fmt: skip
    print(f"finished within the window: {done_in_window:,} ({done_in_window / window:.0f}/s); "
          f"taken by the worker after {first.at:.0f} s: {took / taken:.0f}/s; "
          f"queue at the window's end: {inside[-1].queued:,}; all finished after "
          f"{drained:.1f} s ({total / drained:.0f}/s end to end)")  # fmt: skip
    print(f"worker CPU in the window: {worker_cpu / window * 100:.0f} % of one core")
    print(f"index lag over the window ({len(ages)} samples every {SAMPLE_EVERY * 1000:.0f} ms): "
          f"p50 {percentile(ages, 0.5):.3f} s, p95 {percentile(ages, 0.95):.3f} s, "
          f"p99 {percentile(ages, 0.99):.3f} s, max {max(ages):.3f} s; entries behind: "
          f"median {statistics.median(s.entries for s in inside):.0f}, "
          f"max {max(s.entries for s in inside):,}")  # fmt: skip
    if after:
        print(f"after the window, until all finished and indexed: max lag "
              f"{max(s.age_ms for s in after) / 1000:.3f} s, "
              f"{max(s.entries for s in after):,} entries")  # fmt: skip
    if sampler.pages:
        page_ages = [age / 1000 for at, _, age, _ in sampler.pages if at <= window]
        page_ms = [ms for at, *_, ms in sampler.pages if at <= window]
        print(f"console pages in the window ({len(page_ages)}): indexLag max "
              f"{max(page_ages):.3f} s; read p50 {percentile(page_ms, 0.5):.1f} ms, "
              f"max {max(page_ms):.1f} ms")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--url", help="a Redis to use (default: a throwaway redis-server)")
    parser.add_argument("--rate", type=float, default=500.0, help="tasks published per second")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long to publish")
    parser.add_argument("--pool", choices=("solo", "prefork"), default="solo")
    parser.add_argument("--concurrency", type=int, default=2, help="prefork's processes")
    parser.add_argument("--page-every", type=float, default=0.0, help="a console page every S s")
    args = parser.parse_args()
    with redis_at(args.url) as url:
        run(args, url)


if __name__ == "__main__":
    main()
