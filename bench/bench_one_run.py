"""One run per task: what the start's claim costs the Celery path (issue 33).

Run:  .venv/bin/python bench/bench_one_run.py --base BASE [--url redis://127.0.0.1:6379/13]
      [-n 2000] [--rounds 5]

``BASE`` is a tree without the feature (``git archive main | tar -x -C BASE``). Reuses
``bench_celery.run_once`` (publish ``n`` tasks to a fresh queue, then a solo worker on it,
timed from ready to the last result), with asyncbook's result backend, for two tasks on
workers of two trees, interleaved round by round (forward, then backward):

- ``tracked``: acknowledged when it starts, started at once: no claim (this tree checks
  the rules and calls the ``before_start`` hook);
- ``tracked_late``: ``acks_late``: this tree claims its run at every start (a round trip
  before the body), where the base tree's start rides with the result's write; also run
  on this tree with ``asyncbook_one_run = False`` (``off``).

Reported: each run's worker throughput and CPU per task, and the medians of the per-round
ratios (this ÷ base, this ÷ off: the claim alone, off ÷ base).
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

TASKS = ("tracked", "tracked_late")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--base", required=True, type=Path, help="a tree without the feature")
    parser.add_argument("--url", default="redis://127.0.0.1:6379/13")
    parser.add_argument("-n", type=int, default=2000, help="tasks per run")
    parser.add_argument("--rounds", type=int, default=6, help="an even number")
    args = parser.parse_args()
    trees = {"base": args.base.resolve(), "this": HERE.parent, "off": HERE.parent}
    rest = args.url.split("://", 1)[1]
    os.environ["BENCH_BACKEND_URL"] = f"asyncbook+redis://{rest}"
    runs = [("base", "tracked"), ("this", "tracked")]
    runs += [("base", "tracked_late"), ("this", "tracked_late"), ("off", "tracked_late")]
    rates: dict[tuple[str, str], list[float]] = {run: [] for run in runs}
    cpu: dict[tuple[str, str], list[float]] = {run: [] for run in runs}
    # One namespace for every run: the publishing app (this process) is made once, on the
    # first run's namespace, and a worker on another one would create each task again
    # from its message (the trees' key schemas are the same).
    namespace = f"bench-{uuid.uuid4().hex[:8]}"
    try:
        for round_ in range(args.rounds):
            # Forward, then backward: a run's place in the round matters (the run after
            # another pays for it, about 0.3 ms of worker CPU a task here), so each run is
            # as often early as late.
            for tree, task in runs if round_ % 2 == 0 else runs[::-1]:
                bench_celery.ROOT, bench_celery.HERE = trees[tree], trees[tree] / "bench"
                os.environ["BENCH_ONE_RUN"] = "0" if tree == "off" else "1"
                _, done, cpu_ms = bench_celery.run_once(args.url, task, args.n, namespace)
                rates[tree, task].append(done)
                cpu[tree, task].append(cpu_ms)
            line = "  ".join(f"{t}/{k} {rates[t, k][-1]:5.0f}/s" for t, k in runs)
            print(f"round {round_ + 1}: {line}", flush=True)
    finally:
        client = redis.Redis.from_url(args.url)
        drop_keys(client, "{" + namespace + "}:*")
        client.close()
    print()
    print(f"tasks per run: {args.n}, rounds: {args.rounds}, solo worker, asyncbook's backend")
    for tree, task in runs:
        print(
            f"  {tree:<4} {task:<12} worker {statistics.median(rates[tree, task]):6.0f} tasks/s"
            f"   worker CPU {statistics.median(cpu[tree, task]):.3f} ms/task (medians)"
        )
    pairs = [("this", "base", "tracked"), ("this", "base", "tracked_late")]
    pairs += [("this", "off", "tracked_late"), ("off", "base", "tracked_late")]
    for a, b, task in pairs:
        for label, values in (("throughput", rates), ("CPU per task", cpu)):
            ratio = [x / y for x, y in zip(values[a, task], values[b, task], strict=True)]
            rounds = ", ".join(f"{value:.2f}" for value in ratio)
            median = statistics.median(ratio)
            print(f"  {task} {label}: {a} ÷ {b} median {median:.3f} ({rounds})")


if __name__ == "__main__":
    main()
