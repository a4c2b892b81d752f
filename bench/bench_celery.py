"""Celery integration benchmark: no-op tasks through one solo worker, tracked or not.

Run:  .venv/bin/python bench/bench_celery.py [--url redis://127.0.0.1:6379/13] [-n 3000]

Each run publishes ``n`` tasks of one kind to a fresh queue, then starts a solo worker
on it and times from worker ready to the last result. The kinds run interleaved, round
by round; ratios are taken within a round, then the median over rounds is reported:

- tracked / untracked (target >= 0.85);
- tracked with one ``report_progress`` / ``task_track_started`` with one
  ``update_state`` (target >= 1.0).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import redis
from _servers import drop_keys

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
KINDS = ["untracked", "tracked", "tracked_progress", "started_update"]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed_worker(
    app_module: str, queue: str, env: dict[str, str], client: redis.Redis, last_key: str
) -> tuple[float, float]:
    """Start a solo worker of ``app_module`` (which touches ``BENCH_READY_FILE`` when
    ready) on ``queue``: the seconds from ready until ``last_key`` exists, and the CPU
    seconds the worker spent meanwhile; the worker is stopped after."""
    with tempfile.TemporaryDirectory() as tmp:
        ready = Path(tmp) / "ready"
        env = {**env, "BENCH_READY_FILE": str(ready)}
        command = [
            sys.executable, "-m", "celery", "-A", app_module, "worker",
            "--pool=solo", "-Q", queue, "-l", "warning", "-n", f"{queue}@localhost",
            "--without-gossip", "--without-mingle", "--without-heartbeat",
        ]  # fmt: skip
        worker = subprocess.Popen(command, cwd=HERE, env=env, stdout=subprocess.DEVNULL)
        try:
            while not ready.exists():
                if worker.poll() is not None:
                    raise SystemExit("the worker exited")
                time.sleep(0.002)
            began, cpu = time.perf_counter(), cpu_seconds(worker.pid)
            while not client.exists(last_key):
                if time.perf_counter() - began > 300:
                    raise SystemExit(f"no {last_key} after 300 s")
                time.sleep(0.002)
            return time.perf_counter() - began, cpu_seconds(worker.pid) - cpu
        finally:
            worker.terminate()
            worker.wait(timeout=30)


def run_once(url: str, kind: str, n: int, namespace: str) -> tuple[float, float, float]:
    """Publish rate, worker throughput (both per second), worker CPU ms per task."""
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "BENCH_REDIS_URL": url,
        "BENCH_NAMESPACE": namespace,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE)]),
    }
    os.environ.update({"BENCH_REDIS_URL": url, "BENCH_NAMESPACE": namespace})
    import bench_celery_app

    app = bench_celery_app.app
    app.conf.task_default_queue = queue
    task = app.tasks[f"bench.{kind}"]
    started = time.perf_counter()
    ids = [task.apply_async(queue=queue).id for _ in range(n)]
    publish = n / (time.perf_counter() - started)
    client = redis.Redis.from_url(url)
    seconds, cpu = timed_worker(
        "bench_celery_app", queue, env, client, f"celery-task-meta-{ids[-1]}"
    )
    throughput, cpu_ms = n / seconds, cpu * 1000 / n
    keys = [f"celery-task-meta-{task_id}" for task_id in ids]
    for start in range(0, len(keys), 1000):
        client.delete(*keys[start : start + 1000])
    for key in client.scan_iter(match=f"*{queue}*"):
        client.delete(key)
    client.close()
    return publish, throughput, cpu_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="redis://127.0.0.1:6379/13")
    parser.add_argument("-n", type=int, default=3000, help="tasks per run")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated subset")
    args = parser.parse_args()
    kinds = args.kinds.split(",")
    namespace = f"bench-{uuid.uuid4().hex[:8]}"
    sys.path.insert(0, str(HERE))
    rates: dict[str, list[float]] = {kind: [] for kind in kinds}
    publish: dict[str, list[float]] = {kind: [] for kind in kinds}
    cpu: dict[str, list[float]] = {kind: [] for kind in kinds}
    ratio_tracked: list[float] = []
    ratio_progress: list[float] = []
    try:
        for round_ in range(1, args.rounds + 1):
            for kind in kinds:
                sent, done, cpu_ms = run_once(args.url, kind, args.n, namespace)
                rates[kind].append(done)
                cpu[kind].append(cpu_ms)
                publish[kind].append(sent)
            if {"tracked", "untracked"} <= set(kinds):
                ratio_tracked.append(rates["tracked"][-1] / rates["untracked"][-1])
            if {"tracked_progress", "started_update"} <= set(kinds):
                ratio_progress.append(rates["tracked_progress"][-1] / rates["started_update"][-1])
            line = "  ".join(f"{kind} {rates[kind][-1]:7.0f}/s" for kind in kinds)
            print(f"round {round_}: {line}", flush=True)
    finally:
        client = redis.Redis.from_url(args.url)
        drop_keys(client, "{" + namespace + "}:*")
        client.close()
    print()
    print(f"tasks per run: {args.n}, rounds: {args.rounds}, solo worker, Redis broker+backend")
    for kind in kinds:
        print(
            f"  {kind:<17} worker {statistics.median(rates[kind]):7.0f} tasks/s"
            f"   worker CPU {statistics.median(cpu[kind]):.3f} ms/task"
            f"   publish {statistics.median(publish[kind]):7.0f} tasks/s (medians)"
        )
    if "tracked" in cpu and "untracked" in cpu:
        cpu_ratio = statistics.median(cpu["untracked"]) / statistics.median(cpu["tracked"])
        print(f"worker CPU untracked / tracked (a CPU-bound worker's ratio): {cpu_ratio:.3f}")
    if not ratio_tracked or not ratio_progress:
        return
    print(
        f"tracked / untracked:                        median {statistics.median(ratio_tracked):.3f}"
        f"  (rounds: {', '.join(f'{r:.3f}' for r in ratio_tracked)})"
    )
    print(
        f"tracked+progress / track_started+update_state: median "
        f"{statistics.median(ratio_progress):.3f}"
        f"  (rounds: {', '.join(f'{r:.3f}' for r in ratio_progress)})"
    )


if __name__ == "__main__":
    main()
