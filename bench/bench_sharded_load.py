"""A tracked Celery load on a sharded namespace (issue 20): each master's share of the
Redis time and the single-master ceiling, S = 1 against S = 16, on a local 3-master
Redis Cluster.

Run:  .venv/bin/python bench/bench_sharded_load.py [--rounds 3] [--seconds 10]
      [--concurrency 4]

Starts a throwaway 3-master cluster on loopback ports (``tests/support/cluster.py``,
nothing on disk, stopped by PID) for the book; Celery's broker and results stay on the
main Redis (``FAILOVER_BROKER_URL``, db 14), so the masters serve the book alone. Each
round, S = 1 and S = 16 take turns (the order rotated), each from empty masters:

- a real prefork worker (``failover_app.py``, ``-c --concurrency``) runs tracked tasks
  (``failover.work``: a start, one progress report, the success), installed with
  ``asyncbook_shards=S``;
- a publisher thread here sends them with ``apply_async`` as fast as the worker takes
  them (at most 2,000 ahead), its creates flushed every 50 (the integration's create
  sender), so the window holds both ends of a tracked task;
- after 2 s of warm-up, ``CONFIG RESETSTAT`` on every master opens a window of
  ``--seconds``: the ``usec`` of ``INFO commandstats`` per master (each master's share of
  the Redis time), each master's process CPU (``INFO cpu``), and the tasks that
  succeeded in the book meanwhile (tracked executions per second).

The ceiling: with S = 1 one master serves every task, so the rate at which that master
would be 100% busy (the rate over its CPU fraction) is the most one namespace gets out
of the whole cluster. Results: docs/benchmarks.md, "Sharded namespaces (issue 20)".
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import redis

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]

from bench_shards import cpu_seconds, master_port, redis_usec  # noqa: E402
from failover import worker  # noqa: E402
from failover_app import BROKER, make_app  # noqa: E402

from asyncbook import RedisBook  # noqa: E402
from asyncbook.celery import installed, uninstall  # noqa: E402
from asyncbook.redis import ShardedRedisBook, connect  # noqa: E402
from tests.support.cluster import local_cluster  # noqa: E402

SHARDS = (1, 16)
AHEAD = 2_000
"""How many tasks the publisher may be ahead of the book's successes."""


def succeeded(book: RedisBook) -> int:
    return book.count_by_state()["succeeded"]


def one_window(
    url: str,
    masters: list[redis.Redis],
    shards: int,
    seconds: float,
    concurrency: int,
    folder: Path,
) -> dict[str, Any]:
    """One window of a tracked Celery load on S shards."""
    for master in masters:
        master.flushall()
    namespace, queue = f"load-{uuid.uuid4().hex[:8]}", f"load-{uuid.uuid4().hex[:8]}"
    app = make_app(url, namespace, queue, 0, shards=shards)
    integration = installed(app)
    assert integration is not None
    task = app.tasks["failover.work"]
    book = RedisBook(connect(url), namespace=namespace, shards=shards)
    stop = threading.Event()
    published = [0]

    def publish() -> None:
        while not stop.is_set():
            for _ in range(50):
                task.apply_async((1, 0.0))
            integration.flush_creates()
            published[0] += 50
            while published[0] - succeeded(book) > AHEAD and not stop.is_set():
                time.sleep(0.05)

    with worker(url, namespace, queue, 0, folder, shards, concurrency):
        publisher = threading.Thread(target=publish, daemon=True)
        publisher.start()
        try:
            time.sleep(2.0)  # the worker's processes and the publisher under way
            for master in masters:
                master.config_resetstat()
            cpu_before = [cpu_seconds(master) for master in masters]
            done_before, began = succeeded(book), time.monotonic()
            time.sleep(seconds)
            done, elapsed = succeeded(book) - done_before, time.monotonic() - began
            usec = [redis_usec(master) for master in masters]
            cpu = [
                cpu_seconds(master) - before
                for master, before in zip(masters, cpu_before, strict=True)
            ]
        finally:
            stop.set()
            publisher.join(60)
            uninstall(app)  # its threads stop: none reads this namespace in later windows
    redis.Redis.from_url(BROKER).delete(queue)  # what the worker did not take
    where = book.shard_map() if isinstance(book, ShardedRedisBook) else {}
    placed = [len(where.get(f"127.0.0.1:{master_port(m)}", [])) for m in masters]
    total = sum(usec) or 1.0
    shares = [u / total for u in usec]
    return {
        "rate": done / elapsed,
        "placed": placed,
        "shares": shares,
        "max_share_vs_even": max(shares) * len(masters),
        "busy_cpu": [c / elapsed for c in cpu],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="asyncbook-sharded-load-"))
    with local_cluster(folder / "cluster") as ports:
        url = f"redis+cluster://127.0.0.1:{ports[0]}"
        masters = [redis.Redis(port=port) for port in ports]
        version = masters[0].info("server")["redis_version"]
        print(f"# Python {platform.python_version()}, Redis {version} (3 masters), ")
        print(f"# {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at start")
        runs: dict[int, list[dict[str, Any]]] = {s: [] for s in SHARDS}
        for round_ in range(args.rounds):
            for shards in SHARDS if round_ % 2 == 0 else SHARDS[::-1]:
                run = one_window(url, masters, shards, args.seconds, args.concurrency, folder)
                runs[shards].append(run)
                shares = " / ".join(f"{s:.2f}" for s in run["shares"])
                busy = ", ".join(f"{b:.2f}" for b in run["busy_cpu"])
                print(
                    f"round {round_ + 1}, S={shards:>2}: {run['rate']:6.0f} tracked/s; shares "
                    f"{shares} (shards {run['placed']}); max / even "
                    f"{run['max_share_vs_even']:.2f}; masters' CPU {busy}",
                    flush=True,
                )
        print(f"medians over {args.rounds} rounds of {args.seconds:.0f} s:")
        for shards, each in runs.items():
            rate = statistics.median(r["rate"] for r in each)
            spread = statistics.median(r["max_share_vs_even"] for r in each)
            busiest = statistics.median(max(r["busy_cpu"]) for r in each)
            ceiling = statistics.median(r["rate"] / max(r["busy_cpu"]) for r in each)
            print(
                f"  S={shards:>2}: {rate:,.0f} tracked executions/s; max share / even "
                f"{spread:.2f}; busiest master's CPU {busiest:.2f}; rate at which it would "
                f"be 100% busy {ceiling:,.0f}/s"
            )
        ratios = [m["rate"] / o["rate"] for o, m in zip(runs[1], runs[16], strict=True)]
        print(f"  rate S=16 / S=1 (per round): {', '.join(f'{r:.2f}' for r in ratios)}")


if __name__ == "__main__":
    main()
