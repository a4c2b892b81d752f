"""Monitoring benchmarks (issue 19): what a Prometheus scrape and a CSV download cost.

Run:  .venv/bin/python bench/bench_monitoring.py [--url redis://127.0.0.1:6379/11]
      [--small 1000] [--large 20000] [--rounds 5]

Without ``--url`` it starts a throwaway ``redis-server`` (``_servers.py``'s), so the
round trips counted see nothing else. Prints a markdown table:

a. the gauges read (streams, consumer groups, workers) alone: Redis round trips (counted
   by the client's connection) and time, small vs large;
b. ``GET /metrics`` of a status server over a book of ``--small`` tasks (four workers,
   no consumer group) vs ``--large`` tasks (500 workers seen, a consumer group with every
   notification unacknowledged): per-scrape time ratio, large / small (target <= 2: a
   scrape does not grow with the tasks);
c. ``GET /api/search.csv`` of 10,000 rows vs the ten ``book.search`` pages of 1,000 it
   reads, interleaved: time ratio (what HTTP and the CSV add; target <= 2).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _servers import redis_at  # noqa: E402  (scripts beside this one)
from bench_console import (  # noqa: E402
    CountingConnection,
    fill,
    per_call_ms,
    ratio_rows,
    wipe,
)

CSV_ROWS = 10_000
WORKERS = 500


@contextmanager
def served(book: Any) -> Iterator[str]:
    from asyncbook.web import BackgroundServer, feed_for

    with BackgroundServer(book, feed_for(book)) as server:
        yield server.url.rstrip("/")


def book_of(url: str, tasks: int, busy: bool) -> Any:
    """A book of ``tasks`` tasks; ``busy``: 500 workers seen and a consumer group that
    acknowledged nothing."""
    from asyncbook import RedisBook

    client = redis.Redis.from_url(url, connection_class=CountingConnection)
    book = RedisBook(client, namespace=f"bench-mon-{uuid.uuid4().hex[:8]}")
    now = book.now_ms()
    fill(book, tasks, now)
    if busy:
        client.zadd(book.keys.workers, {f"celery@w{n:03d}": now - n for n in range(WORKERS)})
        book.consume_notifications("bench", "c1", count=1)
    return book


def bench_scrape(small: Any, large: Any, rounds: int) -> list[str]:
    rows = []
    with served(small) as small_url, served(large) as large_url, httpx.Client() as http:
        urls = {id(small): small_url, id(large): large_url}
        small_ms, large_ms, ratio = ratio_rows(
            "scrape", small, large, lambda b: http.get(urls[id(b)] + "/metrics"), rounds, 20
        )
        families = http.get(large_url + "/metrics").text.count("\n# TYPE ")
    rows.append(
        f"| b. `GET /metrics`, large / small book | {small_ms:.2f} ms vs {large_ms:.2f} ms: "
        f"x{ratio:.2f} ({families + 1} families) | <= 2 | {'met' if ratio <= 2 else 'missed'} |"
    )
    return rows


def bench_gauges(small: Any, large: Any, rounds: int) -> list[str]:
    """Run before any server is started: the connections counted are the books' only."""
    from asyncbook.redis._gauges import gauges

    now = large.now_ms()

    def read(book: Any) -> object:
        return book.engine.run(gauges(book.layout, now, 3_600_000))

    before = CountingConnection.sent
    read(large)
    trips = CountingConnection.sent - before
    small_ms, large_ms, ratio = ratio_rows("gauges", small, large, read, rounds, 50)
    return [
        f"| a. the gauges read | {trips} round trip(s); {small_ms:.2f} ms vs {large_ms:.2f} ms "
        f"(x{ratio:.2f}, 500 workers listed) | 1 round trip | {'met' if trips == 1 else 'missed'} |"
    ]


def bench_csv(book: Any, rounds: int) -> list[str]:
    from asyncbook._console import TaskQuery

    def pages() -> None:
        after = None
        for _ in range(CSV_ROWS // 1000):
            after = book.search(TaskQuery(limit=1000, after=after)).next_after

    csv_ms, search_ms, ratios = [], [], []
    with served(book) as url, httpx.Client(timeout=60) as http:

        def download() -> None:
            assert http.get(url + "/api/search.csv").text.count("\n") == CSV_ROWS + 1

        for round_ in range(rounds):
            steps = [(csv_ms, download), (search_ms, pages)]
            for times, work in steps if round_ % 2 == 0 else steps[::-1]:
                times.append(per_call_ms(work, 1))
            ratios.append(csv_ms[-1] / search_ms[-1])
    ratio = statistics.median(ratios)
    return [
        f"| c. `GET /api/search.csv`, {CSV_ROWS:,} rows, vs its 10 search pages | "
        f"{statistics.median(csv_ms):.0f} ms vs {statistics.median(search_ms):.0f} ms: "
        f"x{ratio:.2f} | <= 2 | {'met' if ratio <= 2 else 'missed'} |"
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a Redis to use (default: a throwaway redis-server)")
    parser.add_argument("--small", type=int, default=1_000)
    parser.add_argument("--large", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    assert args.large >= CSV_ROWS, "--large must hold a whole CSV download"
    with redis_at(args.url) as url:
        started = time.perf_counter()
        small = book_of(url, args.small, busy=False)
        large = book_of(url, args.large, busy=True)
        print(f"filled in {time.perf_counter() - started:.0f} s", file=sys.stderr)
        try:
            rows = bench_gauges(small, large, args.rounds)
            rows += bench_scrape(small, large, args.rounds)
            rows += bench_csv(large, args.rounds)
        finally:
            for book in (small, large):
                wipe(book.engine.client, book.namespace)
    print(f"books of {args.small:,} and {args.large:,} tasks, {args.rounds} rounds, medians")
    print()
    print("| measure | result | target | |")
    print("|---|---|---|---|")
    for row in rows:
        print(row)


if __name__ == "__main__":
    main()
