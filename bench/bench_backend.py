"""asyncbook's result backend benchmark: no-op tasks through one solo worker.

Run:  .venv/bin/python bench/bench_backend.py [--url redis://127.0.0.1:6379/13] [-n 2000]

Reuses ``bench_celery.run_once`` (publish ``n`` tasks to a fresh queue, then start a
solo worker on it and time from worker ready to the last result); the worker's result
backend is chosen through ``BENCH_BACKEND_URL``. Three kinds run interleaved, round by
round (their order rotates each round); ratios are taken within a round, then the
median over rounds is reported:

- tracked through ``asyncbook+redis://`` / untracked through ``redis://`` (target >= 0.92);
- untracked through ``asyncbook+redis://`` / untracked through ``redis://`` (>= 1.0);
- publish rate, tracked / untracked (>= 0.9): the publish phase of each run, before its
  worker starts (the publishing app uses asyncbook's backend for both);
- create lag: after ``apply_async`` of a tracked task returns, how long until another
  client finds the task in the book (its create is deferred; "within a few ms");
- Redis server time per tracked execution (<= 50 us): ``INFO commandstats`` deltas over
  the worker's window, usec summed over the outermost commands the clients sent
  (``EXEC``, ``MULTI``, ``BRPOP``, Celery's guard ``GET``...), divided by ``n``. Redis
  7 counts a command queued in MULTI/EXEC or called by a script both on its own and
  inside ``EXEC``/``EVALSHA``, so those nested ones are shown but not summed; nor are
  ``EXISTS`` and ``INFO`` (the benchmark's own polling). Redis's CPU time (``INFO cpu``)
  per execution over the same window is shown as a cross-check.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_celery  # noqa: E402

LUA = [HERE.parent / "asyncbook" / "redis" / "lua", HERE.parent / "asyncbook" / "celery" / "lua"]
HARNESS = {"exists", "info"}
# Queued inside kombu's and Celery's MULTI/EXEC (fetch, ack, result); asyncbook's one
# EVALSHA per tracked execution is sent on its own (top level).
QUEUED = {"zadd", "hset", "zrem", "hdel", "setex", "publish"}
# kind -> (task, result backend scheme)
KINDS = {
    "untracked_redis": ("untracked", "redis"),
    "untracked_asyncbook": ("untracked", "asyncbook+redis"),
    "tracked_asyncbook": ("tracked", "asyncbook+redis"),
}
Stats = dict[str, tuple[int, int]]


def lua_inner_commands() -> set[str]:
    """The Redis commands asyncbook's scripts call (counted inside EVALSHA too)."""
    found: set[str] = set()
    for script in (path for folder in LUA for path in folder.glob("*.lua")):
        text = script.read_text(encoding="utf-8")
        found |= {name.lower() for name in re.findall(r"redis\.p?call\(\s*['\"](\w+)", text)}
    return found


def command_stats(client: redis.Redis) -> Stats:
    info: dict[str, Any] = client.info("commandstats")
    stats = {
        name.removeprefix("cmdstat_"): (int(row["calls"]), int(row["usec"]))
        for name, row in info.items()
    }
    cpu: dict[str, Any] = client.info("cpu")
    stats["(server cpu)"] = (1, round((cpu["used_cpu_sys"] + cpu["used_cpu_user"]) * 1e6))
    return stats


def nested(delta: Stats, inner: set[str]) -> set[str]:
    """The commands of a window that ran inside an EXEC or a script."""
    found = (inner | QUEUED) & delta.keys()
    if "evalsha" not in delta:
        found.discard("get")  # no script ran: the GET is Celery's own guard, top level
    return found


class Window:
    """Snapshots ``INFO commandstats`` where ``run_once`` opens and closes its worker
    window (its two ``cpu_seconds`` calls)."""

    def __init__(self, client: redis.Redis, cpu: Callable[[int], float]) -> None:
        self.client, self.cpu = client, cpu
        self.marks: list[Stats] = []

    def __call__(self, pid: int) -> float:
        self.marks.append(command_stats(self.client))
        return self.cpu(pid)

    def delta(self) -> Stats:
        before, after = self.marks[-2], self.marks[-1]
        out: Stats = {}
        for name, (calls, usec) in after.items():
            calls0, usec0 = before.get(name, (0, 0))
            if calls > calls0 or name == "(server cpu)":
                out[name] = (calls - calls0, usec - usec0)
        return out


def create_lag(app: Any, url: str, namespace: str, n: int = 300) -> list[float]:
    """Milliseconds from ``apply_async`` returning to another client seeing the task."""
    from asyncbook.redis import KeySchema

    keys = KeySchema(namespace)
    other = redis.Redis.from_url(url)
    queue = f"lag-{uuid.uuid4().hex[:8]}"
    task = app.tasks["bench.tracked"]
    lags: list[float] = []
    try:
        for _ in range(n):
            task_id = task.apply_async(queue=queue).id
            began = time.perf_counter()
            while not other.exists(keys.task(task_id)):
                pass
            lags.append((time.perf_counter() - began) * 1000)
    finally:
        other.delete(queue)
        other.close()
    return lags


def ratios(a: list[float], b: list[float]) -> list[float]:
    return [x / y for x, y in zip(a, b, strict=True)]


def show(label: str, values: list[float], target: str, met: bool) -> None:
    rounds = ", ".join(f"{v:.3f}" for v in values)
    verdict = "met" if met else "MISSED"
    print(f"{label:<44} median {statistics.median(values):.3f}  {target}: {verdict}")
    print(f"{'':<44} rounds: {rounds}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--url", default="redis://127.0.0.1:6379/13")
    parser.add_argument("-n", type=int, default=2000, help="tasks per run")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--broker",
        help="the broker's URL (default: --url); on another Redis server, a worker's next "
        "fetch does not queue behind its result write in the one Redis thread",
    )
    args = parser.parse_args()
    if args.broker:
        os.environ["BENCH_BROKER_URL"] = args.broker
    namespace = f"bench-{uuid.uuid4().hex[:8]}"
    rest = args.url.split("://", 1)[1]
    os.environ["BENCH_REDIS_URL"] = args.url
    os.environ["BENCH_NAMESPACE"] = namespace  # before the import: the publisher's book
    os.environ["BENCH_BACKEND_URL"] = f"asyncbook+redis://{rest}"
    import bench_celery_app  # the publishing app: asyncbook's backend

    assert type(bench_celery_app.app.backend).__name__ == "AsyncBookBackend"
    assert bench_celery_app.app.conf.asyncbook_namespace == namespace
    client = redis.Redis.from_url(args.url)
    window = Window(client, bench_celery.cpu_seconds)
    bench_celery.cpu_seconds = window
    inner = lua_inner_commands()
    names = list(KINDS)
    rates: dict[str, list[float]] = {kind: [] for kind in names}
    publish: dict[str, list[float]] = {kind: [] for kind in names}
    cpu: dict[str, list[float]] = {kind: [] for kind in names}
    server: dict[str, list[Stats]] = {kind: [] for kind in names}
    try:
        for round_ in range(args.rounds):
            order = names[round_ % len(names) :] + names[: round_ % len(names)]
            for kind in order:
                task, scheme = KINDS[kind]
                os.environ["BENCH_BACKEND_URL"] = f"{scheme}://{rest}"
                sent, done, cpu_ms = bench_celery.run_once(args.url, task, args.n, namespace)
                rates[kind].append(done)
                publish[kind].append(sent)
                cpu[kind].append(cpu_ms)
                server[kind].append(window.delta())
            line = "  ".join(f"{kind} {rates[kind][-1]:6.0f}/s" for kind in names)
            print(f"round {round_ + 1}: {line}", flush=True)
    finally:
        for key in client.scan_iter(match="{" + namespace + "}:*", count=1000):
            client.delete(key)
    print()
    print(f"tasks per run: {args.n}, rounds: {args.rounds}, solo worker, Redis broker")
    for kind in names:
        print(
            f"  {kind:<20} worker {statistics.median(rates[kind]):6.0f} tasks/s"
            f"   worker CPU {statistics.median(cpu[kind]):.3f} ms/task"
            f"   publish {statistics.median(publish[kind]):6.0f} tasks/s (medians)"
        )
    print()
    tracked = ratios(rates["tracked_asyncbook"], rates["untracked_redis"])
    untracked = ratios(rates["untracked_asyncbook"], rates["untracked_redis"])
    published = ratios(publish["tracked_asyncbook"], publish["untracked_asyncbook"])
    show(
        "1. tracked(asyncbook) / untracked(redis)",
        tracked,
        ">= 0.92",
        statistics.median(tracked) >= 0.92,
    )
    show(
        "2. untracked(asyncbook) / untracked(redis)",
        untracked,
        ">= 1.0",
        statistics.median(untracked) >= 1.0,
    )
    show("3. publish tracked / untracked", published, ">= 0.9", statistics.median(published) >= 0.9)
    lags = sorted(create_lag(bench_celery_app.app, args.url, namespace))
    for key in client.scan_iter(match="{" + namespace + "}:*", count=1000):
        client.delete(key)
    p99 = lags[int(len(lags) * 0.99) - 1]
    print(
        f"   create lag (another client finds the task after apply_async returns): "
        f"median {statistics.median(lags):.2f} ms, p99 {p99:.2f} ms, max {lags[-1]:.2f} ms"
    )
    print()
    print("4. Redis server time per execution (INFO commandstats over the worker window)")
    for kind in names:
        totals, cpus = [], []
        for delta in server[kind]:
            skip = nested(delta, inner) | HARNESS | {"(server cpu)"}
            totals.append(sum(v[1] for k, v in delta.items() if k not in skip) / args.n)
            cpus.append(delta["(server cpu)"][1] / args.n)
        median = statistics.median(totals)
        verdict = ("met" if median <= 50 else "MISSED") if kind == "tracked_asyncbook" else ""
        print(
            f"  {kind:<20} {median:6.1f} us per execution (median)  {verdict}"
            f"   [Redis CPU {statistics.median(cpus):.1f} us per execution]"
        )
        last = server[kind][-1]
        skip = nested(last, inner)
        rows = sorted(last.items(), key=lambda item: -item[1][1])
        for name, (calls, usec) in rows:
            if name in HARNESS or name == "(server cpu)":
                continue
            mark = "  (nested, not summed)" if name in skip else ""
            print(
                f"      {name:<16} {calls / args.n:5.2f} calls/exec"
                f"  {usec / max(calls, 1):6.2f} us/call  {usec / args.n:6.2f} us/exec{mark}"
            )
    client.close()


if __name__ == "__main__":
    main()
