"""What merging the shards costs the console's reads (issue 20): one book of one shard
and one of four, holding the same tasks (``bench_console.fill``) on one throwaway
``redis-server``, each read made on both books in turn, round by round.

Run:  .venv/bin/python bench/bench_sharded_console.py [--tasks 20000] [--rounds 7]
      [--calls 20]

Prints a markdown table: per-call medians (ms) of each read on the one-shard and the
four-shard book, and the median of the per-round ratios (four / one). The four shards
share one server here: the ratio is the work the merge adds (S pages read, merged), not
what spreading them over a Cluster's masters gains.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _servers import throwaway_redis  # noqa: E402
from bench_console import fill, per_call_ms  # noqa: E402


def reads() -> dict[str, Callable[[Any], object]]:
    from asyncbook import TaskQuery

    return {
        "search, newest page (50)": lambda book: book.search(TaskQuery(limit=50)),
        "search, `-runtime` (50)": lambda book: book.search(TaskQuery(sort="-runtime", limit=50)),
        "search, a name (50)": lambda book: book.search(
            TaskQuery(name="proj.tasks.job_3", limit=50)
        ),
        "search, `sort=name` (50)": lambda book: book.search(TaskQuery(sort="name", limit=50)),
        "search, `q` text, no match": lambda book: book.search(TaskQuery(q="nowhere", limit=50)),
        "workers": lambda book: book.workers(),
        "stats, every name, 1 h": lambda book: book.stats(None, 3_600_000),
        "task names": lambda book: book.task_names(),
        "name totals": lambda book: book.name_totals(),
    }


def bench(url: str, tasks: int, rounds: int, calls: int) -> list[str]:
    from asyncbook import RedisBook

    client = redis.Redis.from_url(url)
    one = RedisBook(client, namespace=f"bench-one-{uuid.uuid4().hex[:8]}")
    four = RedisBook(client, namespace=f"bench-four-{uuid.uuid4().hex[:8]}", shards=4)
    rows = [
        f"| read ({tasks:,} tasks) | 1 shard, ms | 4 shards, ms | ratio (4 / 1) |",
        "|---|---|---|---|",
    ]
    try:
        now = one.now_ms()
        for book in (one, four):
            fill(book, tasks, now)
        for label, read in reads().items():
            assert _ids(read(one)) == _ids(read(four)), label
            times: dict[str, list[float]] = {"one": [], "four": []}
            ratios = []
            for round_ in range(rounds):
                order = [("one", one), ("four", four)]
                for name, book in order if round_ % 2 == 0 else order[::-1]:
                    times[name].append(per_call_ms(functools.partial(read, book), calls))
                ratios.append(times["four"][-1] / times["one"][-1])
            rows.append(
                f"| {label} | {statistics.median(times['one']):.2f} "
                f"| {statistics.median(times['four']):.2f} | **{statistics.median(ratios):.2f}** |"
            )
            print(rows[-1], file=sys.stderr)
    finally:
        client.close()  # the throwaway server goes, with both books
    return rows


def _ids(answer: object) -> object:
    """What both books must agree on: a page's totals (not its rows: a batch's creates
    run a shard per thread, so their creation order differs from one shard's), a list's
    names, else the totals."""
    if hasattr(answer, "tasks"):
        return getattr(answer, "totals", None)
    if isinstance(answer, list):
        return [getattr(each, "name", each) for each in answer]
    return getattr(answer, "totals", answer)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=20)
    options = parser.parse_args()
    with throwaway_redis() as server:
        print("\n".join(bench(server.url, options.tasks, options.rounds, options.calls)))


if __name__ == "__main__":
    main()
