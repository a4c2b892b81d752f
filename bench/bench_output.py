"""Output streams at token rate: one task writes ``--rate`` small chunks a second (in
calls of ``--batch`` chunks) for ``--seconds``, and ``--followers`` asyncio followers
(``AsyncRedisBook.follow_output``, one event loop) read them as they come.

Run:  .venv/bin/python bench/bench_output.py [--url redis://127.0.0.1:6379/12]

Without ``--url`` a private ``redis-server`` on a free loopback port serves the run. The
writer is a process of its own (``RedisBook.append_output``, paced to the rate); each
chunk carries the wall-clock time of its write call, so a follower's delivery latency is
from the start of the write to the follower holding the chunk. Redis time per chunk is
from ``INFO commandstats`` (reset before the run): the appends' FCALL time, and all the
server's time (appends and the followers' reads and waits), each over the chunks written.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import statistics
import time
import uuid
from typing import Any

import redis
import redis.asyncio
from _servers import drop_keys, redis_at

from asyncbook import AsyncRedisBook, RedisBook, StartEvent


def write(url: str, namespace: str, rate: int, batch: int, seconds: float) -> None:
    """The writer: ``rate`` chunks a second, ``batch`` per call, paced by the clock."""
    book = RedisBook(redis.Redis.from_url(url), namespace=namespace)
    calls = int(rate * seconds) // batch
    start = time.monotonic()
    for n in range(calls):
        due = start + n * batch / rate
        pause = due - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        stamp = time.time()
        book.append_output("t", *[f"{stamp:.6f} tok{n}.{i} " for i in range(batch)])
    book.apply("t", {"type": "succeed", "atMs": book.now_ms(), "resultRef": "r", "resultHash": "h"})


async def follow(url: str, namespace: str, followers: int) -> list[list[float]]:
    """Every follower's latencies (s), one per chunk, in order."""
    client = redis.asyncio.Redis.from_url(url, max_connections=followers + 8)
    async with AsyncRedisBook(client, namespace=namespace) as book:
        book.output_wait_ms = 200

        async def one() -> list[float]:
            got: list[float] = []
            async for chunk in book.follow_output("t", 0):
                got.append(time.time() - float(chunk.chunk.split(" ", 1)[0]))
            return got

        return list(await asyncio.gather(*(one() for _ in range(followers))))


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def run(url: str, rate: int, batch: int, followers: int, seconds: float) -> dict[str, Any]:
    namespace = f"bench-output-{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(url)
    book = RedisBook(client, namespace=namespace)
    book.create(id="t", now_ms=book.now_ms(), ttl_ms=3_600_000, max_attempts=1)
    book.apply("t", StartEvent(at_ms=book.now_ms(), worker="bench"))
    client.config_resetstat()
    writer = multiprocessing.Process(target=write, args=(url, namespace, rate, batch, seconds))
    writer.start()
    latencies = asyncio.run(follow(url, namespace, followers))
    writer.join()
    stats = client.info("commandstats")
    chunks = int(rate * seconds) // batch * batch
    fcall = sum(v["usec"] for k, v in stats.items() if k.startswith("cmdstat_fcall"))
    total = sum(v["usec"] for v in stats.values())
    every = [value for one in latencies for value in one]
    assert all(len(one) == chunks for one in latencies), "a follower missed a chunk"
    drop_keys(client, "{" + namespace + "}:*")
    client.close()
    return {
        "chunks": chunks,
        "p50_ms": statistics.median(every) * 1000,
        "p99_ms": percentile(every, 0.99) * 1000,
        "max_ms": max(every) * 1000,
        "append_us_per_chunk": fcall / chunks,
        "redis_us_per_chunk": total / chunks,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=None)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--followers", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 10])
    args = parser.parse_args()
    with redis_at(args.url) as url:
        print(f"{args.rate} chunks/s, {args.followers} followers, {args.seconds:g} s")
        print("batch  chunks  p50 ms  p99 ms  max ms  append µs/chunk  Redis µs/chunk")
        for batch in args.batch:
            r = run(url, args.rate, batch, args.followers, args.seconds)
            print(
                f"{batch:>5}  {r['chunks']:>6}  {r['p50_ms']:>6.1f}  {r['p99_ms']:>6.1f}  "
                f"{r['max_ms']:>6.1f}  {r['append_us_per_chunk']:>15.1f}  "
                f"{r['redis_us_per_chunk']:>14.1f}"
            )


if __name__ == "__main__":
    main()
