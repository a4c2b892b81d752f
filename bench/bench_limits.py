"""Concurrency limits: what a limit costs a tracked task's start (issue 34, part 4).

Run:  .venv/bin/python bench/bench_limits.py [--url redis://127.0.0.1:6379/13]
      [-n 2000] [--rounds 6]

Reuses ``bench_celery.run_once`` (publish ``n`` tasks to a fresh queue, then a solo
worker on it, timed from ready to the last result), with asyncbook's result backend, for
two no-op tracked tasks of this tree, interleaved round by round (forward, then
backward):

- ``tracked``: no limit: its start is buffered and written with its result;
- ``tracked_limited``: a name-wide limit it never reaches: each start claims its run
  and takes a slot in one script call (``claim_run_in_slot``: a limited start is
  written at once, so its heartbeats keep the slot), and each end frees the slot (a
  second call).

Reported: each run's worker throughput and CPU per task, and the medians of the
per-round ratios (limited ÷ tracked), and the overhead per start in ms of wall clock
(1/limited - 1/tracked, per task).

``--calls N``: instead, the book calls of a limited start's life alone (one client, a
``RedisBook``, N tasks a round, interleaved): ``two`` (the slot's take, then the run's
claim, as before issue 34's one call) against ``one`` (``claim_run_in_slot``), each
followed by the slot's release; the median time a life, and the per-round ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

import redis

from asyncbook import RedisBook

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_celery  # noqa: E402
from _servers import drop_keys  # noqa: E402

RUNS = ("tracked", "tracked_limited")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--url", default="redis://127.0.0.1:6379/13")
    parser.add_argument("-n", type=int, default=2000, help="tasks per run")
    parser.add_argument("--rounds", type=int, default=6, help="an even number")
    parser.add_argument("--calls", type=int, default=0, help="time the book calls alone")
    args = parser.parse_args()
    if args.calls:
        return calls(args.url, args.calls, args.rounds)
    rest = args.url.split("://", 1)[1]
    os.environ["BENCH_BACKEND_URL"] = f"asyncbook+redis://{rest}"
    rates: dict[str, list[float]] = {run: [] for run in RUNS}
    cpu: dict[str, list[float]] = {run: [] for run in RUNS}
    namespace = f"bench-{uuid.uuid4().hex[:8]}"
    try:
        for round_ in range(args.rounds):
            for task in RUNS if round_ % 2 == 0 else RUNS[::-1]:
                _, done, cpu_ms = bench_celery.run_once(args.url, task, args.n, namespace)
                rates[task].append(done)
                cpu[task].append(cpu_ms)
            line = "  ".join(f"{task} {rates[task][-1]:5.0f}/s" for task in RUNS)
            print(f"round {round_ + 1}: {line}", flush=True)
    finally:
        client = redis.Redis.from_url(args.url)
        drop_keys(client, "{" + namespace + "}:*")
        client.close()
    print()
    print(f"tasks per run: {args.n}, rounds: {args.rounds}, solo worker, asyncbook's backend")
    for task in RUNS:
        print(
            f"  {task:<16} worker {statistics.median(rates[task]):6.0f} tasks/s"
            f"   worker CPU {statistics.median(cpu[task]):.3f} ms/task (medians)"
        )
    limited, plain = rates["tracked_limited"], rates["tracked"]
    for label, values in (("throughput", rates), ("CPU per task", cpu)):
        ratio = [x / y for x, y in zip(values["tracked_limited"], values["tracked"], strict=True)]
        rounds = ", ".join(f"{value:.2f}" for value in ratio)
        print(f"  {label}: limited ÷ tracked median {statistics.median(ratio):.3f} ({rounds})")
    extra = [1000 / x - 1000 / y for x, y in zip(limited, plain, strict=True)]
    print(f"  limit overhead per start: median {statistics.median(extra):.3f} ms of wall clock")


def now_ms() -> int:
    """The worker's clock, as a worker's start gives it (no round trip for the time)."""
    return int(time.time() * 1000)


def calls(url: str, n: int, rounds: int) -> None:
    """A limited start's book calls, two (take, claim) against one (claim_run_in_slot)."""
    client = redis.Redis.from_url(url)
    namespace = f"bench-{uuid.uuid4().hex[:8]}"
    book = RedisBook(client, namespace=namespace)
    payload, slot = "m" * 600, ("key:bench", 1_000_000, 60_000)
    times: dict[str, list[float]] = {"two": [], "one": []}
    try:
        for round_ in range(rounds):
            for way in ("two", "one") if round_ % 2 == 0 else ("one", "two"):
                ids = [f"{way}-{round_}-{i}" for i in range(n)]
                for task_id in ids:
                    book.create(id=task_id, now_ms=book.now_ms(), ttl_ms=3_600_000,
                                max_attempts=1, heartbeat_timeout_ms=60_000)  # fmt: skip
                start = time.perf_counter()
                for task_id in ids:
                    if way == "two":
                        book.take_slot(
                            slot[0], task_id, *slot[1:2], lease_ms=slot[2], payload=payload
                        )
                        book.claim_run(task_id, "w", at_ms=now_ms())
                    else:
                        book.claim_run_in_slot(task_id, "w", (*slot, payload), at_ms=now_ms())
                    book.release_slot(slot[0], task_id, slot[1], lease_ms=slot[2])
                times[way].append((time.perf_counter() - start) * 1000 / n)
            print(
                f"round {round_ + 1}: two {times['two'][-1]:.3f} ms  one {times['one'][-1]:.3f} ms"
            )
    finally:
        drop_keys(client, "{" + namespace + "}:*")
        client.close()
    ratio = [x / y for x, y in zip(times["one"], times["two"], strict=True)]
    rounds_text = ", ".join(f"{value:.2f}" for value in ratio)
    for way in ("two", "one"):
        print(f"  {way}: median {statistics.median(times[way]):.3f} ms a limited start's life")
    print(f"  one ÷ two median {statistics.median(ratio):.3f} ({rounds_text})")


if __name__ == "__main__":
    main()
