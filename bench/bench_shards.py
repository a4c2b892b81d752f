"""Sharded namespaces (issue 20): one namespace of S = 1 vs S = 16 shards on a local
3-master Redis Cluster, interleaved in one run.

Run:  .venv/bin/python bench/bench_shards.py [--rounds 3] [--processes 6] [--seconds 10]
      [--tasks 20000] [--sweep 100000] [--sweep-rounds 2]

Starts a throwaway 3-master cluster on loopback ports (``tests/support/cluster.py``
``local_cluster``: nothing on disk, stopped by PID); every phase starts from empty
masters (FLUSHALL on each). S = 1 and S = 16 take turns, round by round.

a. Spread: ``--processes`` client processes run tracked lifecycles (``create``, then
   ``apply`` start, progress and succeed, each with a callback id, as a worker sends
   them: four round trips) for ``--seconds``; ``CONFIG RESETSTAT`` on every master at
   the start of the window, then the ``usec`` of ``INFO commandstats`` summed per master:
   each master's share of the Redis time. Target for S = 16: max share <= 1.3 x 1/3.
b. Ceiling: the same window's lifecycles per second, and each master's busy fraction
   (its commandstats time, and its process CPU from ``INFO cpu``, over the wall time).
c. Reads: ``--tasks`` tasks of ten names (``bench_console.fill``, one create a call) in
   an S = 1 and an S = 16 namespace; per call: ``list_tasks(limit=50)``, ``count_by_state()``,
   ``search(limit=50)`` and ``stats(window 24 h)``, the two books taking turns; the
   answers are compared (a call not merged over the shards answers differently).
   Target: S = 16 <= 2 x S = 1.
d. Sweep: ``--sweep`` tasks past their deadlines, then ``asyncbook.sweep`` (overdue +
   ``expire_many``, batches of 1,000) until all are expired. Target: S = 16 no slower.
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing
import multiprocessing.synchronize
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from multiprocessing.queues import Queue
from pathlib import Path
from typing import Any

import redis

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from bench_console import DAY_MS, fill  # noqa: E402  (a script beside this one)

from asyncbook import (  # noqa: E402
    CreateSpec,
    ProgressEvent,
    RedisBook,
    StartEvent,
    SucceedEvent,
    sweep,
)
from asyncbook._book import EventInput  # noqa: E402
from asyncbook._console import TaskQuery  # noqa: E402
from asyncbook._sweep import _expire_due  # noqa: E402  (the sweep's loop, on any book)
from asyncbook.redis import ShardedRedisBook, connect  # noqa: E402
from tests.support.cluster import local_cluster  # noqa: E402

SHARDS = (1, 16)
TTL_MS = 3_600_000
OWN_COMMANDS = ("config", "info", "flushall", "cluster", "ping", "command")
"""Commands this benchmark (or the client's start-up) sends, not the load's."""


def open_book(url: str, namespace: str, shards: int) -> RedisBook:
    return RedisBook(connect(url), namespace=namespace, shards=shards)


# -- a and b: a tracked load --------------------------------------------------------------


def lifecycles(
    url: str,
    namespace: str,
    shards: int,
    prefix: str,
    batch: int,
    done: Any,
    go: multiprocessing.synchronize.Event,
    stop: multiprocessing.synchronize.Event,
    ready: Queue[Any],
) -> None:
    """One client process: full lifecycles until ``stop``, one call per change (``batch``
    1) or ``batch`` tasks per call (``create_many``, then three ``apply_many``)."""
    book = open_book(url, namespace, shards)
    book.check_server()
    for shard in getattr(book, "books", [book]):  # connected to every node
        shard.get("nobody")
    ready.put(os.getpid())
    go.wait()
    n = 0
    while not stop.is_set():
        at = int(time.time() * 1000)
        ids = [f"{prefix}-{n + i}" for i in range(batch)]
        start = StartEvent(at_ms=at, worker=prefix)
        progress = ProgressEvent(at_ms=at, progress=50, cursor="1")
        end = SucceedEvent(at_ms=at, result_ref="r", result_hash="h")
        steps: list[tuple[EventInput, str]] = [(start, "start"), (progress, "p1"), (end, "end")]
        if batch == 1:
            book.create(id=ids[0], now_ms=at, ttl_ms=TTL_MS, max_attempts=1)
            for event, name in steps:
                book.apply(ids[0], event, f"{ids[0]}:{name}")
        else:
            book.create_many([CreateSpec(task_id, at, TTL_MS, 1) for task_id in ids])
            for event, name in steps:
                items = [(task_id, event, f"{task_id}:{name}") for task_id in ids]
                book.apply_many(items, full_task=False)
        n += batch
        done.value = n


def redis_usec(master: redis.Redis) -> float:
    """The microseconds a master spent in the load's commands since CONFIG RESETSTAT."""
    stats: dict[str, Any] = master.info("commandstats")
    return sum(
        float(value["usec"])
        for name, value in stats.items()
        if name.removeprefix("cmdstat_").split("|")[0] not in OWN_COMMANDS
    )


def cpu_seconds(master: redis.Redis) -> float:
    """A master's process CPU time so far (user + system)."""
    cpu: dict[str, Any] = master.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def tracked_load(
    url: str, masters: list[redis.Redis], shards: int, processes: int, seconds: float, batch: int
) -> dict[str, Any]:
    """One window of tracked lifecycles: the rate, each master's share and busy fraction."""
    for master in masters:
        master.flushall()
    namespace = f"bench-shards-{uuid.uuid4().hex[:8]}"
    context = multiprocessing.get_context("spawn")
    go, stop = context.Event(), context.Event()
    ready: Queue[Any] = context.Queue()
    counters = [context.RawValue("q", 0) for _ in range(processes)]
    workers = [
        context.Process(
            target=lifecycles,
            args=(url, namespace, shards, f"p{n}", batch, counters[n], go, stop, ready),
            daemon=True,
        )
        for n in range(processes)
    ]
    for worker in workers:
        worker.start()
    try:
        for _ in workers:
            ready.get(timeout=120)
        go.set()
        time.sleep(1.0)  # every process is under way
        for master in masters:
            master.config_resetstat()
        cpu_before = [cpu_seconds(master) for master in masters]
        count_before, began = sum(c.value for c in counters), time.monotonic()
        time.sleep(seconds)
        usec = [redis_usec(master) for master in masters]
        count, elapsed = sum(c.value for c in counters) - count_before, time.monotonic() - began
        cpu = [
            cpu_seconds(master) - before for master, before in zip(masters, cpu_before, strict=True)
        ]
    finally:
        stop.set()
        for worker in workers:
            worker.join(timeout=60)
            if worker.is_alive():
                worker.terminate()
    total = sum(usec) or 1.0
    book = open_book(url, namespace, shards)
    where = book.shard_map() if isinstance(book, ShardedRedisBook) else {}
    placed = [len(where.get(f"127.0.0.1:{master_port(m)}", [])) for m in masters]
    shares = [u / total for u in usec]
    return {
        "shards": shards,
        "batch": batch,
        "rate": count / elapsed,
        "placed": placed,
        "shares": shares,
        "max_share_vs_even": max(shares) * len(masters),
        "busy_commands": [u / 1e6 / elapsed for u in usec],
        "busy_cpu": [c / elapsed for c in cpu],
    }


def master_port(master: redis.Redis) -> int:
    return int(master.connection_pool.connection_kwargs["port"])


def fmt(values: list[float], digits: int = 2) -> str:
    return " / ".join(f"{v:.{digits}f}" for v in values)


def bench_load(
    url: str,
    masters: list[redis.Redis],
    rounds: int,
    processes: int,
    seconds: float,
    batches: list[int],
) -> dict[tuple[int, int], list[dict[str, Any]]]:
    """Windows of tracked load, (batch, S) -> one result per round; S = 1 and S = 16
    take turns, the first of a round alternating."""
    results: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for round_ in range(1, rounds + 1):
        for batch in batches:
            order = SHARDS if round_ % 2 else SHARDS[::-1]
            for shards in order:
                result = tracked_load(url, masters, shards, processes, seconds, batch)
                results.setdefault((batch, shards), []).append(result)
                print(
                    f"a/b round {round_}, batch {batch:>3}, S={shards:>2}: "
                    f"{result['rate']:7.0f} lifecycles/s; shards per master "
                    f"{'/'.join(map(str, result['placed'])) if shards > 1 else '-'}; "
                    f"shares {fmt(result['shares'])} "
                    f"(max/even {result['max_share_vs_even']:.2f}); busy: commandstats "
                    f"{fmt(result['busy_commands'])}, cpu {fmt(result['busy_cpu'])}",
                    flush=True,
                )
    return results


def load_summary(results: dict[tuple[int, int], list[dict[str, Any]]], processes: int) -> None:
    print(f"a/b: {processes} client processes (medians over rounds)")
    for (batch, shards), runs in sorted(results.items()):
        rate = statistics.median(r["rate"] for r in runs)
        shares = statistics.median(r["max_share_vs_even"] for r in runs)
        worst = max(r["max_share_vs_even"] for r in runs)
        hottest = statistics.median(max(r["busy_commands"]) for r in runs)
        cpu = statistics.median(max(r["busy_cpu"]) for r in runs)
        # The busiest master's CPU per lifecycle bounds the rate one core can serve: the
        # ceiling of S = 1, where one master does all of it.
        ceiling = statistics.median(r["rate"] / max(r["busy_cpu"]) for r in runs)
        print(
            f"  batch {batch:>3}, S={shards:>2}: {rate:7,.0f} lifecycles/s; max share / even "
            f"{shares:.2f} (worst {worst:.2f}); busiest master: commandstats {hottest:.2f}, "
            f"cpu {cpu:.2f}; rate at which it would be 100% busy: {ceiling:,.0f}/s"
        )
    for batch in sorted({b for b, _ in results}):
        pairs = zip(results[(batch, 1)], results[(batch, 16)], strict=True)
        ratios = [many["rate"] / one["rate"] for one, many in pairs]
        print(f"  batch {batch:>3}: rate S=16 / S=1 median {statistics.median(ratios):.2f}")


# -- c: reads over the shards -------------------------------------------------------------


def per_call_ms(work: Callable[[], object], calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        work()
    return (time.perf_counter() - started) * 1000 / calls


def bench_reads(
    url: str, masters: list[redis.Redis], tasks: int, rounds: int, calls: int
) -> list[tuple[str, float, float, float, str]]:
    """(call, S=1 ms, S=16 ms, median ratio, agreement) per read."""
    for master in masters:
        master.flushall()
    tag = uuid.uuid4().hex[:8]
    books = {
        s: RedisBook(
            connect(url), namespace=f"bench-reads-{s}-{tag}", shards=s, retention=timedelta(days=2)
        )
        for s in SHARDS
    }
    now = books[1].now_ms()
    for shards, book in books.items():
        began = time.perf_counter()
        fill(book, tasks, now, batch=1)  # one create a call, as a Celery publisher sends them
        print(f"c: filled {tasks:,} tasks, S={shards}, in {time.perf_counter() - began:.1f} s")
    reads: dict[str, Callable[[RedisBook], Any]] = {
        "list_tasks(limit=50)": lambda book: book.list_tasks(limit=50),
        "list_tasks(state='succeeded', limit=50)": lambda book: book.list_tasks(
            "succeeded", limit=50
        ),
        "count_by_state()": lambda book: book.count_by_state(),
        "search(limit=50)": lambda book: book.search(TaskQuery(limit=50)),
        "stats(window 24 h)": lambda book: book.stats(window_ms=DAY_MS, now_ms=now),
    }
    rows = []
    for label, read in reads.items():
        one, many = read(books[1]), read(books[16])
        agreement = agrees(label, one, many)
        times: dict[int, list[float]] = {s: [] for s in SHARDS}
        ratios = []
        for round_ in range(rounds):
            order = SHARDS if round_ % 2 == 0 else SHARDS[::-1]
            for shards in order:
                book = books[shards]
                times[shards].append(per_call_ms(functools.partial(read, book), calls))
            ratios.append(times[16][-1] / times[1][-1])
        row = (
            label,
            statistics.median(times[1]),
            statistics.median(times[16]),
            statistics.median(ratios),
            agreement,
        )
        print(
            f"c: {row[0]}: S=1 {row[1]:.2f} ms, S=16 {row[2]:.2f} ms, ratio {row[3]:.2f}; {row[4]}"
        )
        rows.append(row)
    return rows


def agrees(label: str, one: Any, many: Any) -> str:
    """Whether the S = 16 answer matches the S = 1 answer (same fill, other ids)."""
    if label.startswith("list_tasks"):
        same = [t.state for t in one.tasks] == [t.state for t in many.tasks]
        return f"{len(many.tasks)} tasks, states {'match' if same else 'DIFFER'}"
    if label.startswith("count_by_state"):
        return "counts match" if one == many else f"DIFFER: {many} vs {one}"
    if label.startswith("search"):
        found = (len(one.tasks), len(many.tasks))
        totals = "totals match" if one.totals == many.totals else "totals DIFFER"
        return f"{found[1]} tasks (S=1: {found[0]}), {totals}"
    ends = (sum(one.totals.values()), sum(many.totals.values()))
    return f"totals {ends[1]} (S=1: {ends[0]})"


# -- d: the sweep -------------------------------------------------------------------------


SWEEPS = ("S=1", "S=16", "S=16 merged")
"""The sweeps of part d: ``asyncbook.sweep`` on S = 1 and on S = 16 (each shard swept on
its own), and on S = 16 the sweep's loop run on the whole book (every shard's ``overdue``
merged for each batch, as the sweep ran before it went shard by shard)."""


def bench_sweep(
    url: str, masters: list[redis.Redis], count: int, rounds: int, kinds: list[str]
) -> dict[str, list[tuple[float, float, float]]]:
    """Per kind, per round: (seconds, client CPU seconds, the masters' CPU seconds)."""
    times: dict[str, list[tuple[float, float, float]]] = {kind: [] for kind in kinds}
    for round_ in range(1, rounds + 1):
        order = kinds if round_ % 2 else kinds[::-1]
        for kind in order:
            for master in masters:
                master.flushall()
            book = open_book(url, f"bench-sweep-{uuid.uuid4().hex[:8]}", int(kind[2:4]))
            now = book.now_ms()
            ids = [f"sweep-{i:06d}-{uuid.uuid4().hex[:6]}" for i in range(count)]
            began = time.perf_counter()
            for start in range(0, count, 1000):
                specs = [
                    CreateSpec(task_id, now - 60_000, 1 + i % 1000, 1)
                    for i, task_id in enumerate(ids[start : start + 1000], start)
                ]
                for answer in book.create_many(specs):
                    assert not isinstance(answer, Exception), answer
            created = time.perf_counter() - began
            assert book.overdue_count(now) == count
            cpu_before = [cpu_seconds(master) for master in masters]
            client_before = time.process_time()
            began = time.perf_counter()
            if kind.endswith("merged"):
                expired, batches, _errors = _expire_due(book, book.now_ms(), 1000, 1000)
            else:
                report = sweep(book, book.now_ms(), batch=1000)
                expired, batches = report.expired, report.batches
            elapsed = time.perf_counter() - began
            client = time.process_time() - client_before
            server = sum(cpu_seconds(m) - c for m, c in zip(masters, cpu_before, strict=True))
            assert expired == count, (expired, count)
            assert book.overdue_count(book.now_ms()) == 0
            assert book.count_by_state()["expired"] == count
            times[kind].append((elapsed, client, server))
            print(
                f"d round {round_}, {kind:<11}: {count:,} overdue expired in {elapsed:.2f} s "
                f"({count / elapsed:,.0f}/s, {batches} batches; CPU: client {client:.2f} s, "
                f"masters {server:.2f} s; created in {created:.1f} s)",
                flush=True,
            )
    return times


def sweep_summary(times: dict[str, list[tuple[float, float, float]]], count: int) -> None:
    for kind, runs in times.items():
        seconds = statistics.median(r[0] for r in runs)
        print(
            f"d: sweep of {count:,}, {kind:<11}: median {seconds:.2f} s, CPU client "
            f"{statistics.median(r[1] for r in runs):.2f} s, masters "
            f"{statistics.median(r[2] for r in runs):.2f} s"
        )
    for kind in times:
        if kind == "S=1":
            continue
        pairs = zip(times["S=1"], times[kind], strict=True)
        ratios = [many[0] / one[0] for one, many in pairs]
        print(
            f"d: time ratio {kind} / S=1: median {statistics.median(ratios):.2f} "
            f"(rounds: {', '.join(f'{r:.2f}' for r in ratios)})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--batches", default="1,20", help="tasks per call (a, b)")
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--calls", type=int, default=50, help="reads per timing (c)")
    parser.add_argument("--sweep", type=int, default=100_000)
    parser.add_argument("--sweep-rounds", type=int, default=3)
    parser.add_argument("--sweeps", default=",".join(SWEEPS), help="which sweeps (d)")
    parser.add_argument("--parts", default="abcd", help="which parts to run (ab, c, d)")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="asyncbook-bench-shards-") as folder,
        local_cluster(Path(folder)) as ports,
    ):
        url = f"redis+cluster://127.0.0.1:{ports[0]}"
        masters = [redis.Redis(port=port) for port in ports]
        version = masters[0].info("server")["redis_version"]
        print(f"# Python {platform.python_version()}, Redis {version} (3 masters), ")
        print(f"# {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at start")
        if "a" in args.parts or "b" in args.parts:
            batches = [int(b) for b in args.batches.split(",")]
            load = bench_load(url, masters, args.rounds, args.processes, args.seconds, batches)
            load_summary(load, args.processes)
        if "c" in args.parts:
            bench_reads(url, masters, args.tasks, args.rounds, args.calls)
        if "d" in args.parts and args.sweep:
            kinds = args.sweeps.split(",")
            times = bench_sweep(url, masters, args.sweep, args.sweep_rounds, kinds)
            sweep_summary(times, args.sweep)
        print(f"# load average {os.getloadavg()[0]:.2f} at the end")
        for master in masters:
            master.close()


if __name__ == "__main__":
    main()
