"""Resend benchmark (issue 19, named retry until issue 31): the cost of keeping each
tracked message at publish, and a bulk resend of 1,000 failed tasks.

Run:  .venv/bin/python bench/bench_resend.py [--url redis://127.0.0.1:6379/13] [-n 2000]
      [--rounds 5] [--bulk 1000]

(a) Tracked publish throughput, keep on / keep off (target >= 0.95). Two Celery apps in
    this process, identical but for ``asyncbook_keep_messages``, publish ``n`` tracked
    tasks each (args and kwargs like a real call's) to a queue on the Redis broker,
    interleaved call by call (on, off, off, on, ...); each ``apply_async`` is timed on
    the wall clock and in the thread's CPU time (steadier on a shared box; the create is
    written to Redis inside the call, its answer read later). Keeping costs only at
    publish (a worker runs the same message either way), so this is where the ratio is
    taken; per round, the median over rounds reported.
(b) One bulk resend of ``bulk`` failed tasks, each with its kept message (published by the
    keeping app, then failed in the book): ``POST /api/resend?limit=1000`` on a status
    server, and ``Resender.resend`` called directly (target <= 2 s). Every resend is
    published to the broker.

Uses a throwaway namespace and queues on the Redis at ``--url`` and removes them.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import redis
from _servers import drop_keys
from celery import Celery

from asyncbook import RedisBook
from asyncbook.celery import Integration, Resender, install, uninstall
from asyncbook.web import BackgroundServer, feed_for

ARGS = ("s3://bucket/videos/2026/12/clip-0042.mp4", {"width": 1280, "height": 720})
KWARGS = {"codec": "h264", "bitrate": 2_500_000, "tags": ["ünï", "batch-7"]}


def _name(keep: bool) -> str:
    return "bench.transcode." + ("keep" if keep else "plain")


def make_app(url: str, namespace: str, keep: bool) -> Celery:
    app = Celery(f"bench-resend-{keep}", broker=url, set_as_current=False)
    app.conf.update(
        broker_connection_retry_on_startup=True,
        asyncbook_redis_url=url,
        asyncbook_namespace=namespace,
        asyncbook_keep_messages=keep,
    )

    # A name per app: every installed app's handler sees every publish in this process.
    @app.task(name=_name(keep), tracked=True, ttl=3600, shared=False)
    def transcode(source: str, size: dict[str, int], **options: object) -> None:
        """Never run: only published."""

    return app


def publish(
    app: Celery, integration: Integration, n: int, queue: str
) -> tuple[float, float, list[str]]:
    """Seconds (wall, and this process's CPU) to publish ``n`` tasks and have their creates
    in the book; their ids."""
    task = _task(app)
    started, cpu = time.perf_counter(), time.process_time()
    ids = [task.apply_async(ARGS, KWARGS, queue=queue).id for _ in range(n)]
    integration.flush_creates()
    return time.perf_counter() - started, time.process_time() - cpu, ids


def _task(app: Celery) -> Any:
    return next(task for name, task in app.tasks.items() if name.startswith("bench."))


def publish_interleaved(
    apps: dict[bool, Celery], integrations: dict[bool, Integration], n: int, queue: str
) -> dict[bool, tuple[float, float]]:
    """``n`` publishes of each app, alternating one by one (whichever app first switches
    every call): per app the wall and CPU seconds its publishes took, each publish timed
    on its own (``perf_counter``, ``thread_time``); then both apps' creates flushed."""
    tasks = {keep: _task(app) for keep, app in apps.items()}
    spent = {keep: [0.0, 0.0] for keep in apps}
    for i in range(2 * n):
        keep = bool(i % 2) ^ bool((i // 2) % 2)
        wall, cpu = time.perf_counter(), time.thread_time()
        tasks[keep].apply_async(ARGS, KWARGS, queue=queue)
        spent[keep][1] += time.thread_time() - cpu
        spent[keep][0] += time.perf_counter() - wall
    for integration in integrations.values():
        integration.flush_creates()
    return {keep: (wall, cpu) for keep, (wall, cpu) in spent.items()}


def failed_with_messages(
    book: RedisBook, app: Celery, integration: Integration, n: int, queue: str
) -> list[str]:
    """``n`` tasks published by the keeping app, then failed in the book."""
    _, _, ids = publish(app, integration, n, queue)
    now = book.now_ms()
    events: Iterator[tuple[str, dict[str, object], None]] = (
        item
        for task_id in ids
        for item in (
            (task_id, {"type": "start", "atMs": now, "worker": "bench@h"}, None),
            (task_id, {"type": "fail", "atMs": now + 1, "error": "x", "retryable": False}, None),
        )
    )
    book.apply_many(events, full_task=False)
    return ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="redis://127.0.0.1:6379/13")
    parser.add_argument("-n", type=int, default=2000, help="tasks per publish run")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--bulk", type=int, default=1000, help="tasks in the bulk resend")
    args = parser.parse_args()
    namespace = f"bench-resend-{uuid.uuid4().hex[:8]}"
    queue = f"bench-resend-q-{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(args.url)
    apps = {keep: make_app(args.url, namespace, keep) for keep in (False, True)}
    integrations = {keep: install(app) for keep, app in apps.items()}
    rates: dict[bool, list[float]] = {False: [], True: []}
    cpu_rates: dict[bool, list[float]] = {False: [], True: []}
    ratios: list[float] = []
    cpu_ratios: list[float] = []
    try:
        for keep in (False, True):  # warm both: connections, scripts
            publish(apps[keep], integrations[keep], 200, queue)
        for round_ in range(1, args.rounds + 1):
            spent = publish_interleaved(apps, integrations, args.n, queue)
            drop_keys(client, f"{queue}*")
            for keep, (seconds, cpu) in spent.items():
                rates[keep].append(args.n / seconds)
                cpu_rates[keep].append(args.n / cpu)
            ratios.append(rates[True][-1] / rates[False][-1])
            cpu_ratios.append(cpu_rates[True][-1] / cpu_rates[False][-1])
            print(
                f"round {round_}: keep off {rates[False][-1]:6.0f}/s ({cpu_rates[False][-1]:6.0f}"
                f"/CPU s)  keep on {rates[True][-1]:6.0f}/s ({cpu_rates[True][-1]:6.0f}/CPU s)"
                f"  on/off {ratios[-1]:.3f} (CPU {cpu_ratios[-1]:.3f})",
                flush=True,
            )
        book = RedisBook.from_url(args.url, namespace=namespace)
        warm = failed_with_messages(book, apps[True], integrations[True], 10, queue)
        Resender(book, args.url).resend(warm)  # resend.lua loaded, kombu imported
        ids = failed_with_messages(book, apps[True], integrations[True], args.bulk, queue)
        drop_keys(client, f"{queue}*")
        with (
            BackgroundServer(book, feed_for(book), resender=Resender(book, args.url)) as server,
            httpx.Client(base_url=server.url, timeout=60) as http,
        ):
            started = time.perf_counter()
            resend = f"/api/resend?name={_name(True)}&limit={args.bulk}"
            answer = http.post(resend).json()
            over_http = time.perf_counter() - started
        assert answer["retried"] == args.bulk, answer["results"][:3]
        sent = sum(client.llen(key) for key in client.scan_iter(match=f"{queue}*"))
        assert sent == args.bulk, sent
        drop_keys(client, f"{queue}*")
        again = failed_with_messages(book, apps[True], integrations[True], args.bulk, queue)
        started = time.perf_counter()
        results = Resender(book, args.url).resend(again)
        direct = time.perf_counter() - started
        assert all(result.code is None for result in results)
        assert len(ids) == len(again) == args.bulk
    finally:
        for app in apps.values():
            uninstall(app)
        drop_keys(client, "{" + namespace + "}*", f"{queue}*")
        client.close()
    print()
    print(f"tracked publish, {args.n} tasks a run, {args.rounds} rounds, Redis broker and book")
    for keep in (False, True):
        print(
            f"  keep {'on ' if keep else 'off'}  {statistics.median(rates[keep]):7.0f} tasks/s"
            f"  {statistics.median(cpu_rates[keep]):7.0f} tasks per CPU second (medians)"
        )
    for label, values in (("wall", ratios), ("publisher CPU", cpu_ratios)):
        print(
            f"keep on / keep off, {label}: median {statistics.median(values):.3f}"
            f"  (rounds: {', '.join(f'{r:.3f}' for r in values)})  target >= 0.95"
        )
    print(f"bulk resend of {args.bulk} failed tasks, one call (target <= 2 s):")
    print(f"  POST /api/resend  {over_http:.3f} s")
    print(f"  Resender.resend   {direct:.3f} s")


if __name__ == "__main__":
    main()
