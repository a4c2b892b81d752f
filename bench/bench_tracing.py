"""Lifecycle traces: what ``asyncbook_tracing`` costs a worker (issue 34, part 3).

Run:  .venv/bin/python bench/bench_tracing.py [--url redis://127.0.0.1:6379/13] [-n 2000]
      [--rounds 6]

Reuses ``bench_celery.run_once`` (publish ``n`` tasks to a fresh queue, then a solo worker
on it, timed from ready to the last result), with asyncbook's result backend, for the
``tracked`` and ``tracked_late`` no-op tasks on workers with tracing on and off,
interleaved round by round (forward, then backward). The SDK is set up in both (a tracer
provider, its batch span processor, an exporter that drops the spans) and the publisher
(this process) traces, so every message carries a ``traceparent``: only the worker's
setting differs.

Reported: each run's worker throughput and CPU per task, and the medians of the per-round
ratios, on ÷ off.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import uuid
from pathlib import Path

import redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_celery  # noqa: E402
from _servers import drop_keys  # noqa: E402

RUNS = [("on", "tracked"), ("off", "tracked"), ("on", "tracked_late"), ("off", "tracked_late")]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--url", default="redis://127.0.0.1:6379/13")
    parser.add_argument("-n", type=int, default=2000, help="tasks per run")
    parser.add_argument("--rounds", type=int, default=6, help="an even number")
    args = parser.parse_args()
    rest = args.url.split("://", 1)[1]
    os.environ["BENCH_BACKEND_URL"] = f"asyncbook+redis://{rest}"
    os.environ["BENCH_TRACING"] = "1"  # the publisher (imported once, here) traces
    rates: dict[tuple[str, str], list[float]] = {run: [] for run in RUNS}
    cpu: dict[tuple[str, str], list[float]] = {run: [] for run in RUNS}
    namespace = f"bench-{uuid.uuid4().hex[:8]}"
    try:
        for round_ in range(args.rounds):
            for tracing, task in RUNS if round_ % 2 == 0 else RUNS[::-1]:
                os.environ["BENCH_TRACING"] = "1" if tracing == "on" else "0"
                _, done, cpu_ms = bench_celery.run_once(args.url, task, args.n, namespace)
                rates[tracing, task].append(done)
                cpu[tracing, task].append(cpu_ms)
            line = "  ".join(f"{t}/{k} {rates[t, k][-1]:5.0f}/s" for t, k in RUNS)
            print(f"round {round_ + 1}: {line}", flush=True)
    finally:
        client = redis.Redis.from_url(args.url)
        drop_keys(client, "{" + namespace + "}:*")
        client.close()
    print()
    print(f"tasks per run: {args.n}, rounds: {args.rounds}, solo worker, asyncbook's backend")
    for tracing, task in RUNS:
        print(
            f"  {tracing:<3} {task:<12} worker {statistics.median(rates[tracing, task]):6.0f}"
            f" tasks/s   worker CPU {statistics.median(cpu[tracing, task]):.3f} ms/task (medians)"
        )
    for task in ("tracked", "tracked_late"):
        for label, values in (("throughput", rates), ("CPU per task", cpu)):
            ratio = [x / y for x, y in zip(values["on", task], values["off", task], strict=True)]
            rounds = ", ".join(f"{value:.2f}" for value in ratio)
            print(f"  {task} {label}: on ÷ off median {statistics.median(ratio):.3f} ({rounds})")


if __name__ == "__main__":
    main()
