"""Memory per finished task (issue 32): INFO used_memory over many tasks, and where it goes.

Run:  .venv/bin/python bench/bench_memory.py [--tasks 10000] [--port 0] [--info]

Starts a throwaway redis-server (default config, loopback; ``--port 0`` picks a free
port), creates ``--tasks`` tasks and gives each the five-event life of
``bench_redis_book.celery_life`` (start, progress, a retryable fail, start, succeed, each
with its Celery callback id), then prints the used_memory growth per task and each key
kind's share (``MEMORY USAGE`` of every key of the namespace, summed per kind, divided by
the tasks). ``--info`` also records a name, a queue and args as Celery's publisher would
(the console's name, sort and worker indexes then hold the task too).
"""

from __future__ import annotations

import argparse
import re
import uuid
from collections import defaultdict
from datetime import timedelta

import redis
from _servers import throwaway_redis
from bench_redis_book import celery_life

from asyncbook import RedisBook
from asyncbook._console import PublishInfo

T0 = 1_700_000_000_000

# Key kinds by the part of the name after the tag (first match wins).
KINDS = [
    ("task hash (t:)", r"t:"),
    ("history list (h:)", r"h:"),
    ("callback marker strings (c:)", r"c:"),
    ("info hash (i:)", r"i:"),
    ("kept message (m:)", r"m:"),
    ("state indexes (idx:)", r"idx:"),
    ("name-state indexes (n:)", r"n:"),
    ("sort indexes (by:)", r"by:"),
    ("worker task indexes (w:)", r"w:"),
    ("worker counts (wc:)", r"wc:"),
    ("outbox stream", r"outbox$"),
    ("stats hashes (s:, sa:)", r"sa?:"),
    ("name totals, names, workers", r"(nt|names|workers)$"),
    ("counters, seq, deadlines, other", r""),
]


def kind_of(suffix: str) -> str:
    return next(label for label, pattern in KINDS if re.match(pattern, suffix))


def measure(client: redis.Redis, tasks: int, info: bool) -> tuple[float, dict[str, int]]:
    book = RedisBook(client, namespace="memory", retention=timedelta(hours=24))
    client.memory_purge()
    before = int(client.info("memory")["used_memory"])
    ids = [f"celery-{uuid.uuid4()}" for _ in range(tasks)]
    for task_id in ids:
        published = PublishInfo(name="app.tasks.resize", queue="celery", args="(1, 2)")
        book.create(
            id=task_id,
            now_ms=T0,
            ttl_ms=1_800_000,
            max_attempts=2,
            info=published if info else None,
        )
    items = [item for task_id in ids for item in celery_life(task_id)]
    for start in range(0, len(items), 500):
        book.apply_many(items[start : start + 500])
    book.catch_up_index(batches=10**9)  # the indexes, as a worker's indexer builds them
    client.memory_purge()
    after = int(client.info("memory")["used_memory"])
    kinds: dict[str, int] = defaultdict(int)
    prefix = book.keys.tag + ":"
    for key in client.scan_iter(match=prefix + "*", count=5000):
        kinds[kind_of(key.decode()[len(prefix) :])] += client.memory_usage(key, samples=0) or 0
    return (after - before) / tasks, kinds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--info", action="store_true")
    args = parser.parse_args()
    with throwaway_redis(port=args.port) as server:
        client = redis.Redis(port=server.port)
        per_task, kinds = measure(client, args.tasks, args.info)
        print(f"used_memory per finished 5-event task: {per_task:,.0f} B over {args.tasks:,}")
        print("| key kind | B per task (MEMORY USAGE) |\n|---|---|")
        for label, _ in KINDS:
            if kinds.get(label):
                print(f"| {label} | {kinds[label] / args.tasks:,.0f} |")
        print(f"| all keys | {sum(kinds.values()) / args.tasks:,.0f} |")
        client.close()


if __name__ == "__main__":
    main()
