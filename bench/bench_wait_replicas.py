"""The cost of ``wait_replicas``: ``apply`` throughput with 0 (no WAIT) vs 1 replica.

Run:  .venv/bin/python bench/bench_wait_replicas.py [--applies 400] [--rounds 7]

A private loopback ``redis-server`` and a replica of it (``--replicaof``) serve the run.
Each round times ``--applies`` progress events applied one after the other on a fresh
namespace, once per setting, the settings interleaved round by round; reported as the
median of the per-round ratios (waiting / not waiting).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager

import redis
from _servers import throwaway_redis, wait_until

from asyncbook import ProgressEvent, RedisBook, StartEvent


@contextmanager
def primary_and_replica() -> Iterator[int]:
    """The primary's port, once its replica is linked; both stopped (by PID) after."""
    with (
        throwaway_redis() as primary,
        throwaway_redis("--replicaof", "127.0.0.1", str(primary.port)) as replica,
    ):
        client = redis.Redis(port=replica.port)
        wait_until(lambda: client.info("replication")["master_link_status"] == "up", 20)
        client.close()
        yield primary.port


def applies_per_second(port: int, replicas: int, namespace: str, count: int) -> float:
    book = RedisBook.from_url(
        f"redis://127.0.0.1:{port}", namespace=namespace, wait_replicas=replicas
    )
    tasks = [f"t{n}" for n in range(count // 99 + 1)]  # progress rises to 99 at most
    for task_id in tasks:
        book.create(id=task_id, now_ms=0, ttl_ms=3_600_000, max_attempts=1)
        book.apply(task_id, StartEvent(at_ms=1, worker="w"))
    began = time.perf_counter()
    for n in range(count):
        book.apply(tasks[n // 99], ProgressEvent(at_ms=2 + n, progress=n % 99 + 1, cursor=""))
    return count / (time.perf_counter() - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--applies", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=7)
    options = parser.parse_args()
    rates: dict[int, list[float]] = {0: [], 1: []}
    with primary_and_replica() as port:
        for round_ in range(options.rounds):
            for replicas in (0, 1) if round_ % 2 == 0 else (1, 0):
                name = f"bench-wait-{round_}-{replicas}"
                rates[replicas].append(applies_per_second(port, replicas, name, options.applies))
    ratios = [waiting / plain for waiting, plain in zip(rates[1], rates[0], strict=True)]
    print(f"apply, wait_replicas=0: {statistics.median(rates[0]):8.0f} /s")
    print(f"apply, wait_replicas=1: {statistics.median(rates[1]):8.0f} /s")
    print(f"ratio (1 / 0), median of {options.rounds} rounds: {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
