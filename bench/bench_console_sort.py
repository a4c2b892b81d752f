"""Console sort and search benchmarks (issue 19), beside ``bench_console.py`` (whose
book and fill they reuse).

Run:  .venv/bin/python bench/bench_console_sort.py [--large 100000] [--rounds 7]
      [--baseline-src DIR] [--lifecycles 3000]

Starts a throwaway ``redis-server``. Prints a markdown table:

f. over a book of ``--large`` tasks (``bench_console.fill``: ten names over a day, half
   finished), ``book.search(TaskQuery(sort="-runtime", limit=50))`` vs the newest page
   ``TaskQuery(limit=50)``, interleaved round by round: per-call medians and the median
   ratio (target <= 2); the same for the second page, for ``-runtime`` with a name (one
   task in ten: the sort index's walk) and with a name and ``state=failed`` (one in
   two hundred: the page sorts that state's few tasks itself);
g. a text search that matches nothing (``q`` of text no task holds: the whole scan),
   over the same book: index entries its page's walk examined (``scanned``) plus the
   totals' walk (at most 10,000 records read), whether it says so, and its time;
h. with ``--baseline-src`` (asyncbook's source before this issue): what the sort
   indexes cost the lifecycle, create + start + succeed (``apply_many`` batches of 500)
   through the book, the code before and now taking turns, each in its own process on
   one fresh server: Redis CPU per lifecycle from ``INFO commandstats`` (``usec`` of
   every command, scripts included), and memory per finished task (``INFO used_memory``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _servers import throwaway_redis  # noqa: E402
from bench_console import fill, per_call_ms, wipe  # noqa: E402


def interleaved(work: dict[str, Any], rounds: int, calls: int) -> dict[str, float]:
    """Median per-call ms of each work, the works taking turns going first each round."""
    times: dict[str, list[float]] = {label: [] for label in work}
    labels = list(work)
    for round_ in range(rounds):
        for label in labels if round_ % 2 == 0 else labels[::-1]:
            times[label].append(per_call_ms(work[label], calls))
    return {label: statistics.median(values) for label, values in times.items()}


def bench_sort_and_search(url: str, tasks: int, rounds: int) -> list[str]:
    from asyncbook import RedisBook, TaskQuery

    client = redis.Redis.from_url(url)
    book = RedisBook(client, namespace=f"bench-sort-{uuid.uuid4().hex[:8]}")
    rows = []
    try:
        began = time.perf_counter()
        fill(book, tasks, book.now_ms())
        print(f"filled {tasks:,} tasks in {time.perf_counter() - began:.1f} s", file=sys.stderr)
        newest = TaskQuery(limit=50)
        slowest = TaskQuery(sort="-runtime", limit=50)
        first = book.search(slowest)
        runtimes = [row.info.runtime_ms for row in first.tasks]
        assert len(runtimes) == 50
        assert runtimes == sorted(runtimes, reverse=True), runtimes  # type: ignore[type-var]
        pairs = {
            "first page": (newest, slowest),
            "second page": (
                newest._replace(after=book.search(newest).next_after),
                slowest._replace(after=first.next_after),
            ),
            "name=N": (
                newest._replace(name="proj.tasks.job_3"),
                slowest._replace(name="proj.tasks.job_3"),
            ),
            "name=N, state=failed": (
                newest._replace(name="proj.tasks.job_3", state="failed"),
                slowest._replace(name="proj.tasks.job_3", state="failed"),
            ),
        }
        for label, (plain, sorted_) in pairs.items():
            ms = interleaved(
                {
                    "newest": lambda q=plain: book.search(q),
                    "-runtime": lambda q=sorted_: book.search(q),
                },
                rounds,
                50,
            )
            ratio = ms["-runtime"] / ms["newest"]
            rows.append(
                f"| f. {label}: `sort=-runtime` vs newest, limit 50, {tasks:,} tasks | "
                f"{ms['-runtime']:.2f} ms vs {ms['newest']:.2f} ms: **ratio {ratio:.2f}** | "
                f"≤ 2 | {'met' if ratio <= 2 else 'missed'} |"
            )
        text = TaskQuery(q="no task says this", limit=50)
        page = book.search(text)
        ms = interleaved({"text": lambda: book.search(text)}, rounds, 5)["text"]
        bounded = page.scanned <= 5_000 and not page.scan_complete and not page.totals_exact
        rows.append(
            f"| g. text search over {tasks:,} tasks, no match | page walk `scanned` "
            f"{page.scanned:,} + totals walk ≤ 5,000: ≤ 10,000 records read; "
            f"`scanComplete` {str(page.scan_complete).lower()}, `totalsExact` "
            f"{str(page.totals_exact).lower()}, `nextAfter` "
            f"{'set' if page.next_after else 'absent'}; "
            f"**{ms:.1f} ms** | ≤ 10,000 read, said | {'met' if bounded else 'missed'} |"
        )
        named = book.search(TaskQuery(q="JOB_3", limit=50))
        rows.append(
            f"| g. search box by name (`q=JOB_3`) | {len(named.tasks)} rows, matched "
            f"{named.matched}, `scanned` {named.scanned:,} | — | |"
        )
    finally:
        wipe(client, book.namespace)
        client.close()
    return rows


def lifecycle_cost(url: str, lifecycles: int) -> dict[str, float]:
    """Redis CPU (µs) per create + start + succeed, and memory (B) per finished task, of
    the asyncbook on this process's path, in a fresh namespace."""
    from asyncbook import CreateSpec, RedisBook
    from asyncbook._console import PublishInfo

    client = redis.Redis.from_url(url)
    book = RedisBook(client, namespace=f"life-{uuid.uuid4().hex[:8]}", retention=timedelta(days=1))
    ids = [f"celery-{uuid.uuid4()}" for _ in range(lifecycles)]
    info = PublishInfo(name="proj.tasks.job", queue="celery")
    client.memory_purge()
    memory = client.info("memory")["used_memory"]
    client.config_resetstat()
    for start in range(0, lifecycles, 500):
        part = ids[start : start + 500]
        book.create_many(
            [CreateSpec(task_id, 1_700_000_000_000, 3_600_000, 1, info=info) for task_id in part]
        )
        starts = [
            (task_id, {"type": "start", "atMs": 1_700_000_000_100, "worker": "w"}, None)
            for task_id in part
        ]
        book.apply_many(starts, full_task=False)
        ends = [
            (
                task_id,
                {"type": "succeed", "atMs": 1_700_000_000_900, "resultRef": "r", "resultHash": "h"},
                None,
            )
            for task_id in part
        ]
        book.apply_many(ends, full_task=False)
    usec = sum(
        stat["usec"]
        for name, stat in client.info("commandstats").items()
        if name.startswith("cmdstat_")
    )
    client.memory_purge()
    memory = client.info("memory")["used_memory"] - memory
    wipe(client, book.namespace)
    client.close()
    return {"usec": usec / lifecycles, "bytes": memory / lifecycles}


def bench_lifecycle(url: str, lifecycles: int, rounds: int, baseline_src: str) -> list[str]:
    sides = {"before": baseline_src, "now": str(HERE.parent)}
    figures: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
    for round_ in range(rounds):
        order = list(sides) if round_ % 2 == 0 else list(sides)[::-1]
        for side in order:
            command = [
                sys.executable,
                __file__,
                "--lifecycle-of",
                url,
                "--lifecycles",
                str(lifecycles),
            ]
            env = {**os.environ, "PYTHONPATH": sides[side]}
            out = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
            figures[side].append(json.loads(out.stdout))
    rows = []
    for measure, unit in (("usec", "µs Redis CPU"), ("bytes", "B")):
        before = statistics.median(f[measure] for f in figures["before"])
        now = statistics.median(f[measure] for f in figures["now"])
        rows.append(
            f"| h. per create + start + succeed, {unit} | before {before:,.1f}, now "
            f"{now:,.1f}: **{now / before:.2f}x** ({now - before:+,.1f}) | — | |"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--large", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--lifecycles", type=int, default=3_000)
    parser.add_argument("--baseline-src", help="asyncbook's source before issue 19")
    parser.add_argument("--lifecycle-of", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.lifecycle_of:  # one side of part h (run with that side's PYTHONPATH)
        print(json.dumps(lifecycle_cost(args.lifecycle_of, args.lifecycles)))
        return
    with throwaway_redis() as server:
        rows = bench_sort_and_search(server.url, args.large, args.rounds)
        if args.baseline_src:
            rows += bench_lifecycle(server.url, args.lifecycles, args.rounds, args.baseline_src)
    print(f"{args.large:,} tasks, {args.rounds} rounds, medians")
    print()
    print("| measure | result | target | |")
    print("|---|---|---|---|")
    for row in rows:
        print(row)


if __name__ == "__main__":
    main()
