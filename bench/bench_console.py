"""Operator console benchmarks (issue 12): filter by name, stats, memory and throughput
with task info.

Run:  .venv/bin/python bench/bench_console.py [--url redis://127.0.0.1:6379/11]
      [--large 100000] [--small 1000] [--rounds 5] [--baseline-src DIR]

Without ``--url`` it starts a throwaway ``redis-server`` (so that timings, ``INFO`` and
the round trips counted see nothing else). Prints a markdown table:

a. ``book.search(TaskQuery(name=N, limit=50))`` (and with ``state``) over a book of
   ``--large`` tasks vs ``--small`` tasks, same query: time ratio (target <= 2);
b. ``book.stats(name=N, window_ms=24 h)``: Redis round trips (counted by the client's
   connection: one per request written) and time, small vs large book (ratio);
c. memory per finished task (5 events as the Celery integration records them), as
   ``bench_redis_book.py`` measures it (``INFO used_memory`` over 10,000 tasks on a fresh
   server): created with ``PublishInfo`` (name and queue: args off) vs plain ``create``,
   target <= +300 B; and with a 512-character args repr. With ``--baseline-src`` (a
   source tree of asyncbook before issue 12) the plain figure of that code too;
d. create + start + succeed through the book, with ``PublishInfo`` vs without,
   interleaved round by round: throughput ratio (target >= 0.95);
e. tracked no-op Celery tasks through one solo worker (as ``bench_celery.py`` runs them:
   publish ``n``, start the worker, time from ready to the last result) with
   ``asyncbook_record_info`` on vs off, interleaved: throughput ratio (target >= 0.95).
   The worker imports this file as its app (``BENCH_CONSOLE_APP=1``).
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
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _servers import drop_keys, redis_at, throwaway_redis  # noqa: E402  (scripts beside this one)
from bench_celery import timed_worker  # noqa: E402

DAY_MS = 86_400_000
PARTS = "abcde"
NAMES = [f"proj.tasks.job_{i}" for i in range(10)]
QUEUE = "celery"
ARGS_512 = repr(("x" * 507,))  # 512 characters: the integration's default truncation
assert len(ARGS_512) == 512


class CountingConnection(redis.Connection):
    """A connection that counts the requests it writes: one per command, one per pipeline."""

    sent = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        super().send_packed_command(command, check_health)


def fill(book: Any, tasks: int, now_ms: int, batch: int = 2000) -> None:
    """``tasks`` tasks of ten names created over the last day, ``batch`` a call; half of
    each name's finished (started on one of four workers, then succeeded or, one in ten,
    failed)."""
    from asyncbook import CreateSpec
    from asyncbook._console import PublishInfo

    step = (DAY_MS - 60_000) / tasks
    for first in range(0, tasks, 2000):
        specs, events = [], []
        for i in range(first, min(first + 2000, tasks)):
            created = int(now_ms - DAY_MS + 60_000 + i * step)
            task_id = f"celery-{i:08}-{uuid.uuid4().hex[:24]}"
            info = PublishInfo(name=NAMES[i % len(NAMES)], queue=QUEUE)
            specs.append(CreateSpec(task_id, created, 2 * DAY_MS, 1, info=info))
            if (i // 10) % 2:
                worker = f"celery@host-{i % 4}"
                events.append((task_id, {"type": "start", "atMs": created + 1, "worker": worker}))
                end: dict[str, Any] = {"type": "succeed", "resultRef": "r", "resultHash": "h"}
                if (i // 10) % 20 == 1:
                    end = {"type": "fail", "error": "boom", "retryable": False}
                events.append((task_id, {**end, "atMs": created + 1 + i % 3_000}))
        for start in range(0, len(specs), batch):
            for answer in book.create_many(specs[start : start + batch]):
                assert not isinstance(answer, Exception), answer
        for start in range(0, len(events), 500):
            items = [(task_id, event, None) for task_id, event in events[start : start + 500]]
            book.apply_many(items, full_task=False)


def per_call_ms(work: Callable[[], object], calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        work()
    return (time.perf_counter() - started) * 1000 / calls


def ratio_rows(
    label: str, small: Any, large: Any, work: Callable[[Any], object], rounds: int, calls: int
) -> tuple[float, float, float]:
    """Median per-call ms on the small and the large book, and the median of the per-round
    ratios (large / small); the books take turns going first."""
    times: dict[str, list[float]] = {"small": [], "large": []}
    ratios = []
    for round_ in range(rounds):
        order = [("small", small), ("large", large)]
        for kind, book in order if round_ % 2 == 0 else order[::-1]:
            times[kind].append(per_call_ms(lambda book=book: work(book), calls))
        ratios.append(times["large"][-1] / times["small"][-1])
    return (
        statistics.median(times["small"]),
        statistics.median(times["large"]),
        (statistics.median(ratios)),
    )


def bench_filters_and_stats(url: str, small_n: int, large_n: int, rounds: int) -> list[str]:
    from asyncbook import RedisBook
    from asyncbook._console import TaskQuery

    client = redis.Redis.from_url(url, connection_class=CountingConnection)
    tag = uuid.uuid4().hex[:8]
    small = RedisBook(client, namespace=f"bench-console-s-{tag}", retention=timedelta(days=2))
    large = RedisBook(client, namespace=f"bench-console-l-{tag}", retention=timedelta(days=2))
    rows = []
    try:
        now = small.now_ms()
        for book, n in ((small, small_n), (large, large_n)):
            began = time.perf_counter()
            fill(book, n, now)
            print(f"filled {n:,} tasks in {time.perf_counter() - began:.1f} s", file=sys.stderr)
        name = NAMES[3]
        queries = {
            "search name=N, limit 50": TaskQuery(name=name, limit=50),
            "search name=N, state=succeeded, limit 50": TaskQuery(
                name=name, state="succeeded", limit=50
            ),
            "search name=N, state=queued, limit 50, oldest": TaskQuery(
                name=name, state="queued", limit=50, sort="oldest"
            ),
        }
        for label, query in queries.items():
            page = large.search(query)
            assert len(page.tasks) == 50, page.totals
            assert page.totals_exact
            s, big, ratio = ratio_rows(
                label, small, large, lambda book, q=query: book.search(q), rounds, 100
            )
            verdict = "met" if ratio <= 2 else "missed"
            rows.append(
                f"| a. {label} | {s:.2f} ms vs {big:.2f} ms: **ratio {ratio:.2f}** | ≤ 2 | "
                f"{verdict} |"
            )
        for given_now in (False, True):
            for book in (small, large):
                book.stats(name=name, window_ms=DAY_MS)  # warm: scripts, connection
            before = CountingConnection.sent
            found = large.stats(name=name, window_ms=DAY_MS, now_ms=now if given_now else None)
            trips = CountingConnection.sent - before
            assert found.totals["started"] > 0, found.totals

            def stats(book: Any, given: bool = given_now) -> object:
                return book.stats(name=name, window_ms=DAY_MS, now_ms=now if given else None)

            s, big, ratio = ratio_rows("stats", small, large, stats, rounds, 50)
            how = "`now_ms` given" if given_now else "`now_ms` read from Redis (`TIME`)"
            verdict = "met" if trips == 1 and ratio <= 1.5 else "missed"
            rows.append(
                f"| b. stats name=N, 24 h, {how} | **{trips} round trip(s)**; "
                f"{s:.2f} ms vs {big:.2f} ms: **ratio {ratio:.2f}** "
                f"({found.totals['started']:,} starts in the window) | 1 round trip, "
                f"independent of tasks | {verdict} |"
            )
    finally:
        drop_keys(client, "{" + small.namespace + "}:*")
        drop_keys(client, "{" + large.namespace + "}:*")
        client.close()
    return rows


def celery_events(task_id: str) -> list[tuple[str, Any, str]]:
    from bench_redis_book import celery_life

    return celery_life(task_id)


def memory_per_task(variant: str, tasks: int) -> float:
    """used_memory per finished task (5 events), on a fresh server, for one variant:
    plain, info (name and queue: args off) or args (info with a 512-char args repr)."""
    from asyncbook import RedisBook

    with throwaway_redis() as server:
        client = redis.Redis.from_url(server.url)
        book = RedisBook(client, namespace="memory", retention=timedelta(hours=24))
        client.memory_purge()
        before = client.info("memory")["used_memory"]
        ids = [f"celery-{uuid.uuid4()}" for _ in range(tasks)]
        for start in range(0, tasks, 1000):
            if variant == "plain":
                for task_id in ids[start : start + 1000]:
                    book.create(
                        id=task_id, now_ms=1_700_000_000_000, ttl_ms=1_800_000, max_attempts=2
                    )
                continue
            from asyncbook._console import PublishInfo

            args = ARGS_512 if variant == "args" else None
            kwargs = "{}" if variant == "args" else None
            info = PublishInfo(name=NAMES[0], args=args, kwargs=kwargs, queue=QUEUE)
            for task_id in ids[start : start + 1000]:
                book.create(
                    id=task_id,
                    now_ms=1_700_000_000_000,
                    ttl_ms=1_800_000,
                    max_attempts=2,
                    info=info,
                )
        items = [item for task_id in ids for item in celery_events(task_id)]
        for start in range(0, len(items), 500):
            book.apply_many(items[start : start + 500])
        client.memory_purge()
        after = client.info("memory")["used_memory"]
        client.close()
    return (after - before) / tasks


def bench_memory(tasks: int, baseline_src: str | None) -> list[str]:
    per = {variant: memory_per_task(variant, tasks) for variant in ("plain", "info", "args")}
    rows = []
    extra = per["info"] - per["plain"]
    rows.append(
        f"| c. memory per finished task, info with name and queue (args off) vs plain "
        f"`create` | {per['info']:,.0f} B vs {per['plain']:,.0f} B: **{extra:+,.0f} B** | "
        f"≤ +300 B | {'met' if extra <= 300 else 'missed'} |"
    )
    rows.append(
        f"| c. the same with a 512-char args repr and `{{}}` kwargs | {per['args']:,.0f} B: "
        f"**{per['args'] - per['plain']:+,.0f} B** | — | |"
    )
    if baseline_src:
        command = [sys.executable, __file__, "--memory-variant", "plain", "--tasks", str(tasks)]
        env = {**os.environ, "PYTHONPATH": baseline_src}
        out = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
        before = float(json.loads(out.stdout)["perTask"])
        rows.append(
            f"| c. info (args off) vs the code before issue 12 (plain `create`) | "
            f"{per['info']:,.0f} B vs {before:,.0f} B: **{per['info'] - before:+,.0f} B**; "
            f"plain `create` now {per['plain'] - before:+,.0f} B | ≤ +300 B | "
            f"{'met' if per['info'] - before <= 300 else 'missed'} |"
        )
    return rows


def bench_throughput(url: str, tasks: int, rounds: int) -> list[str]:
    """create + start + succeed through the book, sequentially, per variant."""
    from asyncbook import RedisBook
    from asyncbook._console import PublishInfo

    client = redis.Redis.from_url(url)
    book = RedisBook(
        client, namespace=f"bench-console-t-{uuid.uuid4().hex[:8]}", retention=timedelta(days=1)
    )
    infos = {
        "plain": None,
        "info": PublishInfo(name=NAMES[0], queue=QUEUE),
        "args": PublishInfo(name=NAMES[0], args=ARGS_512, kwargs="{}", queue=QUEUE),
    }
    rates: dict[str, list[float]] = {variant: [] for variant in infos}

    def run(info: Any) -> float:
        now = book.now_ms()
        ids = [f"celery-{uuid.uuid4()}" for _ in range(tasks)]
        began = time.perf_counter()
        for task_id in ids:
            book.create(id=task_id, now_ms=now, ttl_ms=3_600_000, max_attempts=1, info=info)
            book.apply(task_id, {"type": "start", "atMs": now + 1, "worker": "celery@h"})
            book.apply(
                task_id, {"type": "succeed", "atMs": now + 2, "resultRef": "r", "resultHash": "h"}
            )
        return tasks / (time.perf_counter() - began)

    try:
        run(None)  # warm up
        names = list(infos)
        for round_ in range(rounds):
            for variant in names[round_ % 3 :] + names[: round_ % 3]:
                rates[variant].append(run(infos[variant]))
            drop_keys(client, "{" + book.namespace + "}:*")
    finally:
        drop_keys(client, "{" + book.namespace + "}:*")
        client.close()
    rows = []
    for variant, label in (("info", "name and queue"), ("args", "and a 512-char args repr")):
        ratio = statistics.median(
            a / b for a, b in zip(rates[variant], rates["plain"], strict=True)
        )
        target = "≥ 0.95" if variant == "info" else "—"
        verdict = ("met" if ratio >= 0.95 else "missed") if variant == "info" else ""
        rows.append(
            f"| d. create + start + succeed through the book, info ({label}) vs none | "
            f"{statistics.median(rates[variant]):,.0f} vs "
            f"{statistics.median(rates['plain']):,.0f} tasks/s: **ratio {ratio:.2f}** | "
            f"{target} | {verdict} |"
        )
    return rows


def celery_app() -> tuple[Any, Any]:
    """The Celery app of part e and its integration: one tracked no-op, info recorded as
    the environment says (``BENCH_URL``, ``BENCH_NAMESPACE``, ``BENCH_RECORD_INFO``,
    ``BENCH_READY_FILE``)."""
    from celery import Celery, signals

    from asyncbook.celery import install

    url = os.environ["BENCH_URL"]
    app = Celery("bench_console")
    app.conf.update(
        broker_url=url,
        result_backend=url,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        asyncbook_redis_url=url,
        asyncbook_namespace=os.environ["BENCH_NAMESPACE"],
        asyncbook_record_info=os.environ.get("BENCH_RECORD_INFO") == "1",
    )
    integration = install(app)

    @signals.worker_ready.connect(weak=False)
    def on_worker_ready(**_: Any) -> None:
        Path(os.environ["BENCH_READY_FILE"]).touch()

    @app.task(name="bench.console.tracked", tracked=True, ttl=3600)
    def tracked(*args: Any, **kwargs: Any) -> None:
        """A no-op, tracked by asyncbook."""

    return app, integration


if os.environ.get("BENCH_CONSOLE_APP") == "1":
    app, _integration = celery_app()


def celery_once(
    url: str, namespace: str, record_info: bool, n: int, worker_src: str | None = None
) -> float:
    """Worker throughput (tasks/s) of ``n`` tracked no-ops published beforehand; with
    ``worker_src`` the worker runs that asyncbook source tree (the code before issue 12)."""
    from bench_celery import ROOT

    queue = f"bench-console-{uuid.uuid4().hex[:8]}"
    paths = [str(ROOT), str(HERE), os.environ.get("PYTHONPATH", "")]
    env = {
        **os.environ,
        "BENCH_URL": url,
        "BENCH_NAMESPACE": namespace,
        "BENCH_RECORD_INFO": "1" if record_info else "0",
        "BENCH_CONSOLE_APP": "1",
        "PYTHONPATH": os.pathsep.join(([worker_src] if worker_src else []) + paths),
    }
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        publisher, integration = celery_app()
        publisher.conf.task_default_queue = queue
        task = publisher.tasks["bench.console.tracked"]
        ids = [
            task.apply_async(args=(i, "two"), kwargs={"three": 3}, queue=queue).id for i in range(n)
        ]
        # Every installed integration answers Celery's publish signals: one at a time.
        integration.disconnect()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    client = redis.Redis.from_url(url)
    last = f"celery-task-meta-{ids[-1]}"
    seconds, _cpu = timed_worker("bench_console", queue, env, client, last)
    throughput = n / seconds
    from asyncbook import RedisBook

    info = RedisBook(client, namespace=namespace).info(ids[-1])
    assert info is not None
    assert info.name == ("bench.console.tracked" if record_info else None), info
    assert (info.worker is None) == (worker_src is not None), info  # which code ran it
    keys = [f"celery-task-meta-{task_id}" for task_id in ids]
    for start in range(0, len(keys), 1000):
        client.delete(*keys[start : start + 1000])
    drop_keys(client, f"*{queue}*", "{" + namespace + "}:*")
    client.close()
    return throughput


def bench_celery(url: str, n: int, rounds: int, baseline_src: str | None) -> list[str]:
    """Part e, interleaved: info on, info off, and (with ``baseline_src``) the worker
    running the code before issue 12."""
    namespace = f"bench-console-c-{uuid.uuid4().hex[:8]}"
    variants: dict[str, tuple[bool, str | None]] = {"on": (True, None), "off": (False, None)}
    if baseline_src:
        variants["before"] = (False, baseline_src)
    rates: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for round_ in range(rounds):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            record, source = variants[name]
            rates[name].append(celery_once(url, namespace, record, n, source))
        summary = ", ".join(f"{name} {rates[name][-1]:.0f}/s" for name in names)
        print(f"celery round {round_ + 1}: {summary}", file=sys.stderr)

    def ratio(name: str) -> float:
        pairs = zip(rates["on"], rates[name], strict=True)
        return statistics.median(a / b for a, b in pairs)

    def rate(name: str) -> str:
        return f"{statistics.median(rates[name]):,.0f}"

    tasks = "args `(i, 'two')`, kwargs `{'three': 3}`"
    rows = [
        f"| e. tracked no-op Celery tasks, solo worker, `asyncbook_record_info` on vs off "
        f"({tasks}) | {rate('on')} vs {rate('off')} tasks/s: **ratio {ratio('off'):.2f}** | "
        f"≥ 0.95 | {'met' if ratio('off') >= 0.95 else 'missed'} |"
    ]
    if baseline_src:
        rows.append(
            f"| e. the same, info on vs a worker running the code before issue 12 | "
            f"{rate('on')} vs {rate('before')} tasks/s: **ratio {ratio('before'):.2f}** | "
            f"≥ 0.95 | {'met' if ratio('before') >= 0.95 else 'missed'} |"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--url", help="an existing Redis (default: a throwaway redis-server)")
    parser.add_argument("--small", type=int, default=1_000)
    parser.add_argument("--large", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=10_000, help="tasks per memory figure")
    parser.add_argument("--throughput-tasks", type=int, default=2_000)
    parser.add_argument("--celery-tasks", type=int, default=2_000, help="tasks per worker run")
    parser.add_argument("--parts", default=PARTS, help="which measures (default: abcde)")
    parser.add_argument("--baseline-src", help="asyncbook's source before issue 12")
    parser.add_argument("--memory-variant", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_variant:  # one figure, for --baseline-src (run with that PYTHONPATH)
        print(json.dumps({"perTask": memory_per_task(args.memory_variant, args.tasks)}))
        return
    rows: list[str] = []
    with redis_at(args.url) as url:
        if "a" in args.parts or "b" in args.parts:
            rows += bench_filters_and_stats(url, args.small, args.large, args.rounds)
        if "d" in args.parts:
            rows += bench_throughput(url, args.throughput_tasks, args.rounds)
        if "e" in args.parts:
            rows += bench_celery(url, args.celery_tasks, args.rounds, args.baseline_src)
    if "c" in args.parts:
        rows += bench_memory(args.tasks, args.baseline_src)
    print(f"books of {args.small:,} and {args.large:,} tasks, {args.rounds} rounds, medians")
    print()
    print("| measure | result | target | |")
    print("|---|---|---|---|")
    for row in rows:
        print(row)


if __name__ == "__main__":
    main()
