"""Live workers (issue 34): what the workers' records cost Redis per minute.

Run:  .venv/bin/python bench/bench_worker_records.py [--url redis://127.0.0.1:6379/13]
      [--workers 1,100,500] [--renewals 3000]

A throwaway redis-server without ``--url``. For each fleet size W, W workers' records
are written once (a fleet kept in the book), then one worker renews its record
``renewals`` times as its thread does (``RedisBook.announce_worker``: one TIME and one
MULTI/EXEC of six commands). Measured on the server: commands, bytes in and out (INFO
stats) and CPU (INFO cpu, user + sys) per renewal, scaled to one worker's minute (60 /
``WORKER_RENEW_S`` = 12 renewals); the memory one worker's keys take (MEMORY USAGE);
and one read of every record (``worker_records``) at that fleet size.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from _servers import drop_keys, redis_at  # noqa: E402

from asyncbook import RedisBook, WorkerRecord  # noqa: E402
from asyncbook._fleet import WORKER_RENEW_S  # noqa: E402

PER_MINUTE = 60 / WORKER_RENEW_S


def record(n: int) -> WorkerRecord:
    """A record as a prefork worker's main process writes it."""
    return WorkerRecord(
        name=f"celery@host-{n:04d}",
        host=f"host-{n:04d}",
        pid=10_000 + n,
        celery_version="5.5.3",
        asyncbook_version="0.1.0",
        pool="prefork",
        concurrency=8,
        prefetch=32,
        queues=("celery", "video", "asyncbook"),
        started_ms=int(time.time() * 1000),
        running=tuple(f"task-{uuid.uuid4()}" for _ in range(4)),
        load=(0.42, 0.37, 0.3),
    )


def counters(client: Any) -> dict[str, float]:
    stats, cpu = client.info("stats"), client.info("cpu")
    return {
        "commands": stats["total_commands_processed"],
        "bytes_in": stats["total_net_input_bytes"],
        "bytes_out": stats["total_net_output_bytes"],
        "cpu_s": cpu["used_cpu_user"] + cpu["used_cpu_sys"],
    }


def measure(url: str, workers: int, renewals: int) -> dict[str, float]:
    client = redis.Redis.from_url(url)
    namespace = f"bench-fleet-{uuid.uuid4().hex[:8]}"
    book = RedisBook(client, namespace=namespace)
    try:
        for n in range(workers):
            book.announce_worker(record(n))
        mine = record(0)
        before = counters(client)
        started = time.perf_counter()
        for _ in range(renewals):
            book.announce_worker(mine)
        wall = time.perf_counter() - started
        after = counters(client)
        # The INFO calls themselves: two commands, counted out.
        per = {key: (after[key] - before[key]) / renewals for key in before}
        per["commands"] = (after["commands"] - before["commands"] - 2) / renewals
        keys = book.keys
        memory = sum(
            client.memory_usage(key) or 0
            for key in (keys.worker_record(mine.name), keys.worker_live(mine.name))
        )
        fleet = client.memory_usage(keys.fleet) or 0
        read_started = time.perf_counter()
        found, _now = book.worker_records()
        read_ms = (time.perf_counter() - read_started) * 1000
        assert len(found) == workers
        return {
            **per,
            "client_ms": wall / renewals * 1000,
            "memory": memory + fleet / workers,
            "read_ms": read_ms,
        }
    finally:
        drop_keys(client, "{" + namespace + "}:*")
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--url", default=None, help="a Redis (default: a throwaway server)")
    parser.add_argument("--workers", default="1,100,500", help="fleet sizes, comma separated")
    parser.add_argument("--renewals", type=int, default=3000)
    args = parser.parse_args()
    sizes = [int(size) for size in args.workers.split(",")]
    print(f"per worker per minute: {PER_MINUTE:g} renewals (every {WORKER_RENEW_S:g} s)")
    print(
        "| workers kept | commands/min | bytes in/min | bytes out/min | Redis CPU ms/min "
        "| client ms/renewal | memory/worker (B) | read all (ms) |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    with redis_at(args.url) as url:
        for size in sizes:
            m = measure(url, size, args.renewals)
            print(
                f"| {size} | {m['commands'] * PER_MINUTE:.0f} | {m['bytes_in'] * PER_MINUTE:,.0f} "
                f"| {m['bytes_out'] * PER_MINUTE:,.0f} | {m['cpu_s'] * PER_MINUTE * 1000:.2f} "
                f"| {m['client_ms']:.3f} | {m['memory']:,.0f} | {m['read_ms']:.1f} |"
            )


if __name__ == "__main__":
    main()
