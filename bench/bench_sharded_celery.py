"""The Celery integration on a sharded namespace: no-op tracked tasks through one solo
worker, with asyncbook's result backend, on 1 shard and on 4 (``asyncbook_shards``).

Run:  .venv/bin/python bench/bench_sharded_celery.py [--url redis://127.0.0.1:6379/13] [-n 1000]

Each run publishes ``n`` tasks of one kind to a fresh queue, then starts a solo worker on
it and times from worker ready to the last result (``bench_celery.timed_worker``). The
kinds run interleaved, their order rotated round by round; ratios are taken within a
round, then the median over rounds is reported. On one Redis, 4 shards cost what the
sharded path adds, not what a Cluster gains: a publish writes its create at once (no
create sender), and the backend writes the book, then Celery's meta (no fused script).

Then, in this process, the backend's end of an execution alone (a buffered start, then
``store_result`` of a SUCCESS), interleaved the same way: one shard with the fused
script, one shard written apart (as for a book on another Redis), four shards (apart).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_celery  # noqa: E402
from _servers import drop_keys  # noqa: E402

KINDS = {"untracked": ("untracked", 1), "tracked_1": ("tracked", 1), "tracked_4": ("tracked", 4)}
"""kind -> (task, shards)"""


def run(url: str, task_name: str, shards: int, n: int, namespace: str) -> tuple[float, float]:
    """Publish rate and worker throughput (per second) of one run."""
    import bench_celery_app

    from asyncbook.celery import install, uninstall

    app = bench_celery_app.app
    uninstall(app)  # the publisher's book: this run's shards and namespace
    app.conf.update(asyncbook_shards=shards, asyncbook_namespace=namespace)
    install(app)
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    app.conf.task_default_queue = queue
    task = app.tasks[f"bench.{task_name}"]
    started = time.perf_counter()
    ids = [task.apply_async(queue=queue).id for _ in range(n)]
    publish = n / (time.perf_counter() - started)
    env = {
        **os.environ,
        "BENCH_SHARDS": str(shards),
        "BENCH_NAMESPACE": namespace,
        "PYTHONPATH": os.pathsep.join([str(HERE.parent), str(HERE)]),
    }
    client = redis.Redis.from_url(url)
    seconds, _cpu = bench_celery.timed_worker(
        "bench_celery_app", queue, env, client, f"celery-task-meta-{ids[-1]}"
    )
    keys = [f"celery-task-meta-{task_id}" for task_id in ids]
    for start in range(0, len(keys), 1000):
        client.delete(*keys[start : start + 1000])
    drop_keys(client, f"*{queue}*")
    client.close()
    return publish, n / seconds


STORE_KINDS = {"1 shard, fused": (1, True), "1 shard, apart": (1, False), "4 shards": (4, False)}
"""kind -> (shards, fused)"""


def store_app(url: str, shards: int, fused: bool) -> tuple[Any, Any, str]:
    """An app on asyncbook's backend with one tracked task, installed: (app, integration,
    namespace)."""
    from celery import Celery

    from asyncbook.celery import install

    namespace = f"bench-{uuid.uuid4().hex[:8]}"
    app = Celery(namespace, broker="memory://", backend=f"asyncbook+{url}", set_as_current=False)
    app.conf.update(
        asyncbook_namespace=namespace,
        asyncbook_shards=shards,
        asyncbook_redis_url=url,
        result_backend_thread_safe=True,
    )

    def store() -> None:
        """Never run: the backend only reads its options."""

    app.task(tracked=True, ttl=600, name="bench.store", shared=False)(store)
    integration = install(app)
    if not fused:  # as for a book on another Redis than the backend's
        book: Any = integration.book
        book.script_beside = lambda client, source: None
    return app, integration, namespace


def store_rate(app: Any, integration: Any, n: int) -> float:
    """Ends per second: a buffered start, then the backend's ``store_result``."""
    from celery import states

    from asyncbook import CreateSpec, StartEvent
    from asyncbook.celery._tracking import callback_id, now_ms

    ids = [str(uuid.uuid4()) for _ in range(n)]
    integration.book.create_many([CreateSpec(task_id, now_ms(), 600_000, 1) for task_id in ids])
    backend, recorder = app.backend, integration.recorder
    started = time.perf_counter()
    for task_id in ids:
        start = StartEvent(at_ms=now_ms(), worker="w")
        recorder.buffer((task_id, start, callback_id(task_id, "start", 0, "b")), rides=True)
        request = SimpleNamespace(
            task="bench.store", id=task_id, retries=0, group=None, chord=None, parent_id=None,
            root_id=None, children=[], ignore_result=False, delivery_info={}, hostname="w",
            args=(), kwargs={}, properties={}, origin="bench",
        )  # fmt: skip
        backend.store_result(task_id, 1, states.SUCCESS, request=request)
    return n / (time.perf_counter() - started)


def store_rounds(url: str, n: int, rounds: int) -> None:
    from asyncbook.celery import uninstall

    made = {kind: store_app(url, *given) for kind, given in STORE_KINDS.items()}
    names = list(made)
    rates: dict[str, list[float]] = {kind: [] for kind in names}
    client = redis.Redis.from_url(url)
    try:
        for kind in names:  # warm up
            store_rate(made[kind][0], made[kind][1], 50)
        for round_ in range(rounds):
            for kind in names[round_ % len(names) :] + names[: round_ % len(names)]:
                rates[kind].append(store_rate(made[kind][0], made[kind][1], n))
    finally:
        for app, _integration, namespace in made.values():
            uninstall(app)
            drop_keys(client, "{" + namespace + "*")
        drop_keys(client, "celery-task-meta-*")
        client.close()
    print(f"\nthe backend's end of an execution, in process ({n} per run, {rounds} rounds)")
    for kind in names:
        shown = ", ".join(f"{rate:.0f}" for rate in rates[kind])
        print(f"  {kind:<16} {statistics.median(rates[kind]):6.0f} ends/s  (rounds: {shown})")
    for kind in names[1:]:
        ratio = [a / b for a, b in zip(rates[kind], rates[names[0]], strict=True)]
        print(f"  {kind} / {names[0]}: median {statistics.median(ratio):.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--url", default="redis://127.0.0.1:6379/13")
    parser.add_argument("-n", type=int, default=1000, help="tasks per run")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--store-only", action="store_true", help="skip the worker runs")
    args = parser.parse_args()
    if args.store_only:
        store_rounds(args.url, args.n, args.rounds)
        return
    base = f"bench-{uuid.uuid4().hex[:8]}"
    rest = args.url.split("://", 1)[1]
    os.environ.update(
        {
            "BENCH_REDIS_URL": args.url,
            "BENCH_NAMESPACE": base,
            "BENCH_BACKEND_URL": f"asyncbook+redis://{rest}",
        }
    )
    names = list(KINDS)
    rates: dict[str, list[float]] = {kind: [] for kind in names}
    publish: dict[str, list[float]] = {kind: [] for kind in names}
    try:
        for round_ in range(args.rounds):
            for kind in names[round_ % len(names) :] + names[: round_ % len(names)]:
                task, shards = KINDS[kind]
                sent, done = run(args.url, task, shards, args.n, f"{base}-{shards}")
                rates[kind].append(done)
                publish[kind].append(sent)
            line = "  ".join(f"{kind} {rates[kind][-1]:6.0f}/s" for kind in names)
            print(f"round {round_ + 1}: {line}", flush=True)
    finally:
        client = redis.Redis.from_url(args.url)
        drop_keys(client, "{" + base + "*", f"{base}*")
        client.close()
    print(f"\ntasks per run: {args.n}, rounds: {args.rounds}, solo worker, Redis broker")
    for kind in names:
        print(
            f"  {kind:<10} worker {statistics.median(rates[kind]):6.0f} tasks/s"
            f"   publish {statistics.median(publish[kind]):6.0f} tasks/s (medians)"
        )
    for label, mine, theirs in (
        ("worker, tracked 4 shards / 1 shard", rates["tracked_4"], rates["tracked_1"]),
        ("publish, tracked 4 shards / 1 shard", publish["tracked_4"], publish["tracked_1"]),
        ("worker, tracked 4 shards / untracked", rates["tracked_4"], rates["untracked"]),
        ("worker, tracked 1 shard / untracked", rates["tracked_1"], rates["untracked"]),
    ):
        each = [a / b for a, b in zip(mine, theirs, strict=True)]
        shown = ", ".join(f"{value:.2f}" for value in each)
        print(f"{label:<40} median {statistics.median(each):.3f}  (rounds: {shown})")
    store_rounds(args.url, args.n, args.rounds)


if __name__ == "__main__":
    main()
