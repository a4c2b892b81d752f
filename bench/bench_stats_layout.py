"""The stats layout of issue 18 (one HINCRBY per stats hash and event) against the code
before it: what writing the stats costs, and what reading them does.

Run:  .venv/bin/python bench/bench_stats_layout.py --baseline-src DIR [--url URL]
      [--tasks 100000] [--rounds 9]

``DIR`` is a source tree of asyncbook before the change (``git archive <rev> asyncbook
bench | tar -x -C DIR``). Without ``--url`` it starts a throwaway ``redis-server``. It
fills a book of ``--tasks`` tasks (bench_console.py's ``fill``: ten names over a day,
half of them run) with each code in turn, counting the server's HINCRBY and PEXPIRE
calls (``INFO commandstats``), then times ``stats(name, 24 h)`` and ``stats(None,
24 h)``: the old reader on the old book against this one on the new, interleaved, and
the same on a dense day (every minute has succeeded and failed runs in all 15 buckets),
written straight into the hashes. The answers must be equal.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _servers import throwaway_redis  # noqa: E402  (scripts beside this one)
from bench_console import NAMES, fill, wipe  # noqa: E402

DAY_MS = 86_400_000
HOUR_MS = 3_600_000


def calls(client: redis.Redis) -> dict[str, int]:
    info: dict[str, Any] = client.info("commandstats")
    return {key.removeprefix("cmdstat_"): int(stat["calls"]) for key, stat in info.items()}


def filled(url: str, namespace: str, tasks: int, now: int, src: str | None) -> dict[str, int]:
    """HINCRBY and PEXPIRE calls while ``fill`` writes the book (in a process of the
    baseline's code when ``src`` is given)."""
    client = redis.Redis.from_url(url)
    before = calls(client)
    if src is None:
        from datetime import timedelta

        from asyncbook import RedisBook

        fill(RedisBook(client, namespace=namespace, retention=timedelta(days=2)), tasks, now)
    else:
        env = {**os.environ, "PYTHONPATH": src}
        argv = [sys.executable, __file__, "--fill", namespace, "--url", url]
        subprocess.run([*argv, "--tasks", str(tasks), "--now", str(now)], env=env, check=True)
    after = calls(client)
    return {name: after.get(name, 0) - before.get(name, 0) for name in ("hincrby", "pexpire")}


def dense(client: redis.Redis, book: Any, now: int, old_layout: bool) -> None:
    for hour in range(now // HOUR_MS - 25, now // HOUR_MS + 1):
        fields: dict[str, int] = {}
        for m in range(60):
            fields.update({f"{m}:S": 60, f"{m}:expired": 1, f"{m}:cancelled": 1})
            if old_layout:  # 30 succeeded and 30 failed, 4 runs in each bucket
                fields.update({f"{m}:succeeded": 30, f"{m}:failed": 30})
                fields.update({f"{m}:b{b}": 4 for b in range(15)})
            else:  # per bucket 2 succeeded, 2 failed (STATS_FAILED_UNIT in _info.lua)
                fields.update({f"{m}:r{b}": 2 + 2 * 2**31 for b in range(15)})
        client.hset(book.keys.stats(hour, "dense"), mapping=fields)


def server_us(client: redis.Redis, work: Callable[[], object]) -> int:
    """The server's own time for the script ``work`` calls (SLOWLOG at 0 µs)."""
    client.slowlog_reset()
    work()
    entries: list[dict[str, Any]] = client.slowlog_get(16)
    return max(e["duration"] for e in entries if e["command"].lower().startswith(b"evalsha"))


def per_call_ms(work: Callable[[], object], calls: int = 20) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        work()
    return (time.perf_counter() - started) * 1000 / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--baseline-src", help="asyncbook's source before issue 18")
    parser.add_argument("--url")
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--fill", help=argparse.SUPPRESS)
    parser.add_argument("--now", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fill:
        filled(args.url, args.fill, args.tasks, args.now, None)
        return
    if not args.baseline_src:
        parser.error("--baseline-src is needed: the code to compare with")
    if args.url:
        run(args, args.url, own_server=False)
    else:
        with throwaway_redis("--slowlog-log-slower-than", "0") as server:
            run(args, server.url, own_server=True)


def run(args: argparse.Namespace, url: str, own_server: bool) -> None:
    from asyncbook import RedisBook

    path = Path(args.baseline_src) / "asyncbook" / "redis" / "_console.py"
    spec = importlib.util.spec_from_file_location("asyncbook.redis._console_before", path)
    assert spec is not None
    assert spec.loader is not None
    before = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(before)
    client = redis.Redis.from_url(url)
    old = RedisBook(client, namespace="bench-stats-old")
    new = RedisBook(client, namespace="bench-stats-new")
    now = old.now_ms()
    print("| measure | before | after | after / before |")
    print("|---|---|---|---|")
    try:
        wrote_old = filled(url, old.namespace, args.tasks, now, args.baseline_src)
        wrote_new = filled(url, new.namespace, args.tasks, now, None)
        for name in ("hincrby", "pexpire"):
            a, b = wrote_old[name], wrote_new[name]
            print(f"| {name.upper()} calls filling {args.tasks:,} tasks | {a:,} | {b:,} | "
                  f"{b / a:.3f} |")  # fmt: skip
        dense(client, old, now, old_layout=True)
        dense(client, new, now, old_layout=False)
        for name in (NAMES[3], None, "dense"):
            hours = range(now // HOUR_MS - 25, now // HOUR_MS + 1)
            sizes = [sum(client.hlen(b.keys.stats(h, name)) for h in hours) for b in (old, new)]

            def old_stats(name: str | None = name) -> Any:
                return old.engine.run(before.stats(old.layout, name, DAY_MS, now))

            def new_stats(name: str | None = name) -> Any:
                return new.stats(name, DAY_MS, now)

            assert old_stats() == new_stats(), name
            times: dict[str, list[float]] = {"old": [], "new": []}
            server: dict[str, list[int]] = {"old": [], "new": []}
            ratios = []
            for round_ in range(args.rounds):
                order = [("old", old_stats), ("new", new_stats)]
                for kind, work in order if round_ % 2 == 0 else order[::-1]:
                    times[kind].append(per_call_ms(work))
                    if own_server:
                        server[kind].append(server_us(client, work))
                ratios.append(times["new"][-1] / times["old"][-1])
            label = "every name" if name is None else name
            print(f"| stats({label}, 24 h): fields read, ms | {sizes[0]:,}, "
                  f"{statistics.median(times['old']):.2f} | {sizes[1]:,}, "
                  f"{statistics.median(times['new']):.2f} | {statistics.median(ratios):.3f} "
                  f"({min(ratios):.2f}-{max(ratios):.2f}) |")  # fmt: skip
            if own_server:
                a, b = (statistics.median(server[kind]) for kind in ("old", "new"))
                print(f"| stats({label}, 24 h): stats.lua's time in Redis, µs | {a:,.0f} | "
                      f"{b:,.0f} | {b / a:.3f} |")  # fmt: skip
        totals = old.engine.run(before.name_totals(old.layout))
        assert totals == new.name_totals(), "name totals differ"
        print(f"| name totals | {len(totals)} names | equal | |")
    finally:
        wipe(client, old.namespace)
        wipe(client, new.namespace)
        client.close()


if __name__ == "__main__":
    main()
