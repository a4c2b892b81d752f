"""AsyncRedisBook against RedisBook: ``get`` throughput and ``follow`` latency.

Run:  .venv/bin/python bench/bench_async_book.py [--url redis://127.0.0.1:6379/12]

Without ``--url`` a private ``redis-server`` on a free loopback port serves the run (so
other sessions' traffic stays out of it). Every comparison is measured in one run,
interleaved round by round, and reported as the median of the per-round ratios.

- ``get``: one task with a 5-event history read ``--gets`` times, one call after the
  other: ``RedisBook.get`` vs ``await AsyncRedisBook.get`` in one coroutine, then the
  async book with 32 coroutines at once on its client's pool; the async book on
  asyncio's own loop and on uvloop (what uvicorn runs), each round on a fresh loop.
- ``follow``: a writer applies ``--versions`` progress events (1 %, 2 %, ...: at most
  99, as progress only rises) one at a time, each once the follower holds the previous
  one; latency is from the start of the write to the follower holding that version.
  ``follow_task`` (the sync follower, in a thread) vs ``async for ... in
  AsyncRedisBook.follow`` (on an event loop of each kind).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import redis
from _servers import drop_keys, redis_at

from asyncbook import AsyncRedisBook, RedisBook
from asyncbook._watch import Message
from asyncbook.redis import follow_task

_T = TypeVar("_T")
ROUNDS = 9
CONCURRENCY = 32
NOW = 1_700_000_000_000


def task_with_history(book: RedisBook, task_id: str) -> None:
    """A running task with 5 history entries (start, four progress events)."""
    book.create(id=task_id, now_ms=NOW, ttl_ms=10**12, max_attempts=1)
    book.apply(task_id, {"type": "start", "atMs": NOW + 1, "worker": "w"}, f"{task_id}:s")
    for percent in (20, 40, 60, 80):
        progress = {"type": "progress", "atMs": NOW + percent, "progress": percent, "cursor": "c"}
        book.apply(task_id, progress, f"{task_id}:{percent}")


def per_second(count: int, seconds: float) -> float:
    return count / seconds


def sync_gets(book: RedisBook, task_id: str, n: int) -> float:
    started = time.perf_counter()
    for _ in range(n):
        book.get(task_id)
    return per_second(n, time.perf_counter() - started)


async def async_gets(book: AsyncRedisBook, task_id: str, n: int, concurrency: int) -> float:
    async def reader(count: int) -> None:
        for _ in range(count):
            await book.get(task_id)

    started = time.perf_counter()
    await asyncio.gather(*(reader(n // concurrency) for _ in range(concurrency)))
    return per_second(n // concurrency * concurrency, time.perf_counter() - started)


LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {"asyncio": asyncio.new_event_loop}
with contextlib.suppress(ImportError):
    import uvloop

    LOOPS["uvloop"] = uvloop.new_event_loop


def on_loop(loop: str, work: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
    """``work()`` run to its end on a fresh event loop of kind ``loop``."""
    with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
        return runner.run(work())


def bench_get(url: str, namespace: str, n: int) -> None:
    book = RedisBook.from_url(url, namespace=namespace)
    task_with_history(book, "g")
    columns = [f"{loop}{suffix}" for loop in LOOPS for suffix in ("", f" x{CONCURRENCY}")]
    rows: list[list[float]] = []

    def async_rates(loop: str) -> list[float]:
        async def work() -> list[float]:
            async with AsyncRedisBook.from_url(url, namespace=namespace) as async_book:
                assert await async_book.get("g") == book.get("g")
                return [
                    await async_gets(async_book, "g", n, 1),
                    await async_gets(async_book, "g", n, CONCURRENCY),
                ]

        return on_loop(loop, work)

    for _ in range(ROUNDS):
        row = [sync_gets(book, "g", n)]
        for loop in LOOPS:
            row += async_rates(loop)
        rows.append(row)
    book.client.close()
    print(f"get, {n} calls per round, {ROUNDS} rounds interleaved (calls/s):")
    print("  " + "".join(f"{name:>16}" for name in ["sync", *columns]))
    for row in rows:
        print("  " + "".join(f"{rate:16.0f}" for rate in row))
    for index, name in enumerate(columns, start=1):
        ratio = statistics.median(row[index] / row[0] for row in rows)
        print(f"  async ({name}) / sync: median ratio {ratio:.2f}")


def drive(
    book: RedisBook, task_id: str, versions: int, seen: Callable[[int], float]
) -> list[float]:
    """Write ``versions`` progress events, each once the previous one was seen; the
    latencies (s) from each write's start to the follower holding it."""
    latencies = []
    for step in range(1, versions + 1):
        progress = {
            "type": "progress",
            "atMs": NOW + 1 + step,
            "progress": step,
            "cursor": "c",
        }
        written = time.perf_counter()
        book.apply(task_id, progress)
        latencies.append(seen(step + 1) - written)  # version 1 is the start
    book.apply(
        task_id,
        {"type": "succeed", "atMs": NOW + versions + 10, "resultRef": "r", "resultHash": "h"},
    )
    return latencies


class Seen:
    """The newest version a follower holds, and when it got there (any thread)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.version = 0
        self.at: dict[int, float] = {}
        self.changed = threading.Condition()

    def hold(self, version: int) -> None:
        now = time.perf_counter()
        with self.changed:
            for held in range(self.version + 1, version + 1):
                self.at[held] = now
            self.version = max(self.version, version)
            self.changed.notify_all()

    def wait_for(self, version: int) -> float:
        with self.changed:
            if not self.changed.wait_for(lambda: self.version >= version, timeout=10):
                raise SystemExit(f"{self.name}: the follower never saw version {version}")
            return self.at[version]


def follow_sync(book: RedisBook, task_id: str, versions: int) -> list[float]:
    seen = Seen("sync")

    def on_batch(messages: list[Message]) -> None:
        newest = max((m.id for m in messages if m.id is not None), default=0)
        seen.hold(newest)

    follower = threading.Thread(
        target=follow_task, args=(book, task_id, on_batch), kwargs={"cursor": 1}, daemon=True
    )
    follower.start()
    time.sleep(0.1)  # subscribed
    latencies = drive(book, task_id, versions, seen.wait_for)
    follower.join(10)
    return latencies


def follow_async(
    url: str, namespace: str, book: RedisBook, task_id: str, versions: int, loop: str
) -> list[float]:
    seen = Seen(loop)

    async def follow() -> None:
        async with AsyncRedisBook.from_url(url, namespace=namespace) as async_book:
            async for result in async_book.follow(task_id, 1):
                seen.hold(result.task.version)

    follower = threading.Thread(target=on_loop, args=(loop, follow), daemon=True)
    follower.start()
    time.sleep(0.1)  # subscribed
    latencies = drive(book, task_id, versions, seen.wait_for)
    follower.join(10)
    return latencies


def bench_follow(url: str, namespace: str, versions: int) -> None:
    book = RedisBook.from_url(url, namespace=namespace)
    rows: list[list[list[float]]] = []
    for _ in range(ROUNDS):
        ids = [f"f-{uuid.uuid4().hex[:8]}" for _ in range(1 + len(LOOPS))]
        for task_id in ids:
            book.create(id=task_id, now_ms=NOW, ttl_ms=10**12, max_attempts=1)
            book.apply(task_id, {"type": "start", "atMs": NOW + 1, "worker": "w"})
        row = [follow_sync(book, ids[0], versions)]
        for task_id, loop in zip(ids[1:], LOOPS, strict=True):
            row.append(follow_async(url, namespace, book, task_id, versions, loop))
        rows.append(row)
    book.client.close()

    def ms(values: list[float], q: float) -> float:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000

    print(f"follow, {versions} versions per round, {ROUNDS} rounds interleaved (latency, ms):")
    for row in rows:
        cells = [
            f"{name} p50 {ms(lat, 0.5):.3f} p99 {ms(lat, 0.99):.3f}"
            for name, lat in zip(["sync", *LOOPS], row, strict=True)
        ]
        print("  " + "   ".join(cells))
    for index, loop in enumerate(LOOPS, start=1):
        ratio = statistics.median(
            statistics.median(row[index]) / statistics.median(row[0]) for row in rows
        )
        print(f"  async ({loop}) / sync median latency: median ratio {ratio:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", help="a Redis to use (default: a private redis-server)")
    parser.add_argument("--gets", type=int, default=4000)
    parser.add_argument("--versions", type=int, default=99, choices=range(1, 100), metavar="1-99")
    options = parser.parse_args()
    namespace = f"bench-async-{uuid.uuid4().hex[:8]}"
    with redis_at(options.url) as url:
        bench_get(url, namespace, options.gets)
        bench_follow(url, namespace, options.versions)
        if options.url:
            client = redis.Redis.from_url(url)
            drop_keys(client, "{" + namespace + "}:*")
            client.close()


if __name__ == "__main__":
    main()
