"""Group summary lookups: a group of 10,000 members answers as fast as a group of 10.

    .venv/bin/python bench/bench_groups.py [--redis-url URL] [--rounds 5] [--calls 2000]

Creates both groups in a throwaway namespace, then times ``book.group(id)`` for each in
interleaved rounds and prints the per-call medians and their ratio (large ÷ small).
The summary is one HGETALL of counters the scripts keep, so the ratio should stay ≈ 1.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

from _servers import drop_keys

from asyncbook import RedisBook

FAR = 10**15


def _fill(book: RedisBook, group_id: str, members: int) -> None:
    for n in range(members):
        book.create(id=f"{group_id}-{n}", now_ms=0, ttl_ms=FAR, max_attempts=1, group_id=group_id)
    start = {"type": "start", "atMs": 1, "worker": "w"}
    half = [(f"{group_id}-{n}", start, None) for n in range(0, members, 2)]
    book.apply_many(half, full_task=False)


def _per_call(book: RedisBook, group_id: str, calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        book.group(group_id)
    return (time.perf_counter() - started) / calls


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/13")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args(argv)
    namespace = f"bench-groups-{uuid.uuid4().hex[:8]}"
    book = RedisBook.from_url(args.redis_url, namespace=namespace)
    try:
        _fill(book, "small", 10)
        _fill(book, "large", 10_000)
        small: list[float] = []
        large: list[float] = []
        for _ in range(args.rounds):
            small.append(_per_call(book, "small", args.calls))
            large.append(_per_call(book, "large", args.calls))
        s, g = statistics.median(small), statistics.median(large)
        print(f"group of 10:     {s * 1e6:7.1f} µs per summary (median of {args.rounds} rounds)")
        print(f"group of 10,000: {g * 1e6:7.1f} µs per summary")
        print(f"ratio large/small: {g / s:.2f} (target <= 1.5)")
    finally:
        drop_keys(book.client, "{" + namespace + "}:*")


if __name__ == "__main__":
    main()
