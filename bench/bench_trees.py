"""The same book workloads on two versions of the code: is a refactor within noise?

Run:  .venv/bin/python bench/bench_trees.py [--base REV] [--rounds 7] [--url URL]

``--base`` (a git revision, default ``HEAD~1``) is exported with ``git archive`` into a
temporary directory; the other side is this working tree. Each round runs every workload
once per side, each in a fresh Python process importing that side's ``asyncbook``
(``PYTHONPATH``), the order of the sides alternating round by round; the ratio (this tree ÷
base) is taken within a round, and the median over rounds reported. Workloads, on
``RedisBook`` over the given Redis (a fresh namespace each, removed after):

- ``lifecycle``: create, start, progress, succeed, one call each, sequentially (tasks/s);
- ``batch``: the same lives through ``apply_many``, batches of 100 (events/s);
- ``fused``: start and succeed applied together in one ``apply_in_script`` call, the
  result backend's fast path (executions/s);
- ``reads``: ``get`` and a delta ``resume`` of a finished task (reads/s; the tasks' lives,
  written first, are not timed: before issue 31 they were, and the figure mixed 3,000
  applies into 2,000 reads);
- ``sweep``: ``sweep`` of ``--sweep-tasks`` tasks all past their deadline, created by
  another book (the sweeping book knows none of them), batches of 1,000 (expiries/s).

``--workloads`` picks some of them (comma-separated; all by default).

Besides the rate (wall clock), each child reports the CPU time it spent per operation and
the CPU time the Redis server spent per operation (``INFO cpu`` before and after: give
``--url`` a private server that nothing else uses, or that figure counts the others'
work too). On a shared machine the wall-clock rate swings with the other load; the CPU
figures swing much less, and say which side (client or server) a difference comes from.
Their ratios are reported so that higher is better too (base's CPU ÷ this tree's).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _servers import drop_keys

ROOT = Path(__file__).resolve().parent.parent
WORKLOADS = ("lifecycle", "batch", "fused", "reads", "sweep")
FUSED_SOURCE = """
local answers = apply_events(KEYS, ARGV, 1)
if not answers then return {'!unknown'} end
return {'ok', 'done', answers}
"""


class Meter:
    """Wall time, this process's CPU time and the server's CPU time over one workload."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def server_cpu(self) -> float:
        info = self.client.info("cpu")
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    def start(self) -> None:
        self.server = self.server_cpu()
        self.cpu = time.process_time()
        self.wall = time.perf_counter()

    def stop(self, count: int) -> dict[str, float]:
        wall = time.perf_counter() - self.wall
        cpu = time.process_time() - self.cpu
        server = self.server_cpu() - self.server
        return {
            "rate": count / wall,
            "cpu_us": cpu / count * 1e6,
            "server_us": server / count * 1e6,
        }


def sweep_child(url: str, n: int) -> dict[str, float]:
    """The sweep workload: ``n`` overdue tasks expired by one ``sweep`` (expiries/s)."""
    import redis

    from asyncbook import CreateSpec, RedisBook, sweep

    client = redis.Redis.from_url(url)
    namespace = f"bench-trees-{uuid.uuid4().hex[:8]}"
    creator = RedisBook(client, namespace=namespace)
    now = int(time.time() * 1000)
    specs = [
        CreateSpec(f"celery-{uuid.uuid4()}", now - 120_000, 60_000 + i % 1000, 1) for i in range(n)
    ]
    for at in range(0, n, 1000):
        creator.create_many(specs[at : at + 1000])
    book = RedisBook(client, namespace=namespace)
    book.now_ms()
    meter = Meter(client)
    meter.start()
    report = sweep(book, now, batch=1000)
    figures = meter.stop(report.expired)
    assert report.expired == n, report
    drop_keys(client, "{" + namespace + "}:*")
    return figures


def child(workload: str, url: str, n: int) -> dict[str, float]:
    """One workload on the ``asyncbook`` this process imports: operations per second."""
    import redis

    from asyncbook import ProgressEvent, RedisBook, StartEvent, SucceedEvent

    client = redis.Redis.from_url(url)
    namespace = f"bench-trees-{uuid.uuid4().hex[:8]}"
    book = RedisBook(client, namespace=namespace)
    ids = [f"celery-{uuid.uuid4()}" for _ in range(n)]
    for task_id in ids:
        book.create(id=task_id, now_ms=1_700_000_000_000, ttl_ms=10**12, max_attempts=2)
    start = StartEvent(at_ms=1_700_000_000_001, worker="w")
    progress = ProgressEvent(at_ms=1_700_000_000_002, progress=50, cursor="c")
    succeed = SucceedEvent(at_ms=1_700_000_000_003, result_ref="s3://r", result_hash="h")

    def lifecycle() -> int:
        for task_id in ids:
            book.apply(task_id, start, f"{task_id}:s")
            book.apply(task_id, progress, f"{task_id}:p")
            book.apply(task_id, succeed, f"{task_id}:d")
        return len(ids)

    def batch() -> int:
        items = [
            (task_id, event, f"{task_id}:{mark}")
            for task_id in ids
            for event, mark in ((start, "s"), (progress, "p"), (succeed, "d"))
        ]
        for at in range(0, len(items), 100):
            book.apply_many(items[at : at + 100], full_task=False)
        return len(items)

    def fused() -> int:
        script = book.events_script(FUSED_SOURCE)
        key = book.keys.task("bench-fused-meta")
        for task_id in ids:
            book.apply_in_script(
                task_id, [(start, f"{task_id}:s"), (succeed, f"{task_id}:d")], script, key, []
            )
        return len(ids)

    def reads() -> int:
        for task_id in ids:
            book.get(task_id)
            book.resume(task_id, 1, full_task=False)
        return 2 * len(ids)

    work: Callable[[], int] = {
        "lifecycle": lifecycle,
        "batch": batch,
        "fused": fused,
        "reads": reads,
    }[workload]
    if workload == "reads":
        lifecycle()  # the tasks to read, finished: not timed
    meter = Meter(client)
    meter.start()
    count = work()
    figures = meter.stop(count)
    drop_keys(client, "{" + namespace + "}:*")
    return figures


def export(rev: str, into: Path) -> None:
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", rev, "asyncbook"],
        check=True,
        capture_output=True,
    ).stdout
    with tempfile.TemporaryFile() as file:
        file.write(archive)
        file.seek(0)
        with tarfile.open(fileobj=file) as tar:
            tar.extractall(into, filter="data")


def run_side(tree: Path, workload: str, url: str, n: int, sweep_n: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    count = sweep_n if workload == "sweep" else n
    command = [sys.executable, __file__, "--child", workload, "--url", url, "-n", str(count)]
    output = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
    figures: dict[str, float] = json.loads(output.stdout)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--base", default="HEAD~1")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--url", default="redis://127.0.0.1:6379/12")
    parser.add_argument("-n", type=int, default=1500)
    parser.add_argument("--sweep-tasks", type=int, default=100_000)
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--child", choices=WORKLOADS)
    options = parser.parse_args()
    if options.child == "sweep":
        print(json.dumps(sweep_child(options.url, options.n)))
        return
    if options.child:
        print(json.dumps(child(options.child, options.url, options.n)))
        return
    workloads = [w for w in options.workloads.split(",") if w]
    assert set(workloads) <= set(WORKLOADS), workloads
    with tempfile.TemporaryDirectory(prefix="asyncbook-base-") as folder:
        base = Path(folder)
        export(options.base, base)
        sides = {"base": base, "tree": ROOT}
        runs: dict[str, dict[str, list[dict[str, float]]]] = {
            w: {side: [] for side in sides} for w in workloads
        }
        for round_ in range(options.rounds):
            order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
            for workload in workloads:
                for side in order:
                    figures = run_side(
                        sides[side], workload, options.url, options.n, options.sweep_tasks
                    )
                    runs[workload][side].append(figures)
                last, first = runs[workload]["tree"][-1], runs[workload]["base"][-1]
                print(
                    f"round {round_ + 1} {workload:10} tree {last['rate']:9,.0f}/s  "
                    f"base {first['rate']:9,.0f}/s  ratio {last['rate'] / first['rate']:.3f}  "
                    f"client CPU {first['cpu_us'] / last['cpu_us']:.3f}  "
                    f"server CPU {first['server_us'] / last['server_us']:.3f}",
                    file=sys.stderr,
                    flush=True,
                )
    print(f"this tree vs {options.base}, {options.rounds} rounds, n={options.n}")
    for workload in workloads:
        tree, old = runs[workload]["tree"], runs[workload]["base"]
        ratios = [t["rate"] / b["rate"] for t, b in zip(tree, old, strict=True)]
        print(
            f"{workload:10} tree {statistics.median(t['rate'] for t in tree):9,.0f}/s  "
            f"base {statistics.median(b['rate'] for b in old):9,.0f}/s  "
            f"ratio {statistics.median(ratios):.2f} "
            f"(min {min(ratios):.2f}, max {max(ratios):.2f})"
        )
        for figure, name in (("cpu_us", "client CPU"), ("server_us", "server CPU")):
            ratios = [b[figure] / t[figure] for t, b in zip(tree, old, strict=True)]
            print(
                f"{'':10} {name} µs/op tree {statistics.median(t[figure] for t in tree):7.1f}  "
                f"base {statistics.median(b[figure] for b in old):7.1f}  "
                f"ratio {statistics.median(ratios):.2f} "
                f"(min {min(ratios):.2f}, max {max(ratios):.2f})"
            )


if __name__ == "__main__":
    main()
