"""RedisBook benchmarks: apply vs a bare EVALSHA, apply_many, resume, memory per task.

Run:  .venv/bin/python bench/bench_redis_book.py [--url redis://127.0.0.1:6379/12]

Every comparison is measured in one run, interleaved round by round, and reported as a
ratio; absolute numbers on a shared machine are noise.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable
from datetime import timedelta

import redis
from _servers import drop_keys, throwaway_redis

from asyncbook import AsyncEvent, FailEvent, ProgressEvent, RedisBook, StartEvent, SucceedEvent

ROUNDS = 5


def celery_life(task_id: str) -> list[tuple[str, AsyncEvent, str]]:
    """Five events as the Celery integration records them: start, progress, a retry, success."""
    t0 = 1_700_000_000_000
    return [
        (task_id, StartEvent(at_ms=t0 + 100, worker="celery@host-1"), f"{task_id}:s:0"),
        (
            task_id,
            ProgressEvent(at_ms=t0 + 1_000, progress=40, cursor="chunk-4"),
            f"{task_id}:p:40",
        ),
        (task_id, FailEvent(at_ms=t0 + 2_000, error="gpu lost", retryable=True), f"{task_id}:r:0"),
        (task_id, StartEvent(at_ms=t0 + 3_000, worker="celery@host-2"), f"{task_id}:s:1"),
        (
            task_id,
            SucceedEvent(
                at_ms=t0 + 4_000,
                result_ref=f"celery-task-meta-{task_id}",
                result_hash="sha256:" + "ab" * 32,
            ),
            f"{task_id}:ok:1",
        ),
    ]


def timed(work: Callable[[], int]) -> float:
    """Operations per second of one call of ``work`` (which returns its operation count)."""
    started = time.perf_counter()
    count = work()
    return count / (time.perf_counter() - started)


def bench_apply_vs_evalsha(client: redis.Redis, book: RedisBook, n: int) -> None:
    bare = client.register_script("return 1")
    bare()

    def fresh_tasks() -> list[str]:
        prefix = uuid.uuid4().hex[:8]
        ids = [f"{prefix}-{i}" for i in range(n // 3)]
        for task_id in ids:
            book.create(id=task_id, now_ms=0, ttl_ms=10**12, max_attempts=1)
        return ids

    def applies(ids: list[str]) -> int:
        for task_id in ids:
            book.apply(task_id, StartEvent(at_ms=1, worker="w"), f"{task_id}:s")
            book.apply(task_id, ProgressEvent(at_ms=2, progress=50, cursor="c"), f"{task_id}:p")
            book.apply(
                task_id,
                SucceedEvent(at_ms=3, result_ref="s3://r", result_hash="h"),
                f"{task_id}:d",
            )
        return 3 * len(ids)

    def evalshas() -> int:
        for _ in range(n):
            bare()
        return n

    book_rates, bare_rates = [], []
    for _ in range(ROUNDS):
        ids = fresh_tasks()
        bare_rates.append(timed(evalshas))
        book_rates.append(timed(lambda ids=ids: applies(ids)))  # type: ignore[misc]
        drop_keys(client, book.keys.tag + ":*")
    ratio = statistics.median(b / e for b, e in zip(book_rates, bare_rates, strict=True))
    print(
        f"apply (sequential, one client): {statistics.median(book_rates):,.0f}/s; "
        f"bare EVALSHA 'return 1': {statistics.median(bare_rates):,.0f}/s; "
        f"ratio {ratio:.2f} (target >= 0.70)"
    )


def bench_apply_many(client: redis.Redis, book: RedisBook, tasks: int) -> None:
    """Batches of 100 in stream order, with and without the tasks' histories in the answers."""
    rates: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(ROUNDS):
        for full_task in (True, False):
            prefix = uuid.uuid4().hex[:8]
            ids = [f"{prefix}-{i}" for i in range(tasks)]
            for task_id in ids:
                book.create(id=task_id, now_ms=1_700_000_000_000, ttl_ms=10**9, max_attempts=2)
            items = [item for task_id in ids for item in celery_life(task_id)]
            batches = [items[i : i + 100] for i in range(0, len(items), 100)]

            def run(batches: list[list[tuple[str, AsyncEvent, str]]] = batches) -> int:
                for batch in batches:
                    book.apply_many(batch, full_task=full_task)  # noqa: B023
                return sum(len(batch) for batch in batches)

            rates[full_task].append(timed(run))
            drop_keys(client, book.keys.tag + ":*")
    for full_task, label in ((True, "full tasks"), (False, "full_task=False")):
        print(
            f"apply_many, batches of 100, answers with {label}: median "
            f"{statistics.median(rates[full_task]):,.0f} events/s "
            f"(min {min(rates[full_task]):,.0f}; issue 32: >= 25,000)"
        )


def bench_resume(client: redis.Redis, book: RedisBook) -> None:
    lengths = {}
    for size in (10, 1000):
        task_id = f"resume-{size}"
        book.create(id=task_id, now_ms=0, ttl_ms=10**12, max_attempts=size)
        items: list[tuple[str, AsyncEvent, None]] = []
        for _attempt in range(size // 2):
            items.append((task_id, StartEvent(at_ms=1, worker="w"), None))
            items.append((task_id, FailEvent(at_ms=2, error="x", retryable=True), None))
        book.apply_many(items)
        task = book.get(task_id)
        assert task is not None
        assert task.version == size
        lengths[size] = task_id

    def resumes(task_id: str, full: bool) -> Callable[[], int]:
        def run() -> int:
            version = book.resume(task_id, 0, full_task=False).task.version
            for _ in range(2000):
                book.resume(task_id, version - 3, full_task=full)
            return 2000

        return run

    for full in (False, True):
        small, large = [], []
        for _ in range(ROUNDS):
            small.append(timed(resumes(lengths[10], full)))
            large.append(timed(resumes(lengths[1000], full)))
        ratio = statistics.median(s / big for s, big in zip(small, large, strict=True))
        label = "full task" if full else "events only (full_task=False)"
        print(
            f"resume delta of 3 events, {label}: 10 entries {statistics.median(small):,.0f}/s, "
            f"1000 entries {statistics.median(large):,.0f}/s, time ratio {ratio:.2f}"
            + (" (target <= 1.5)" if not full else "")
        )
    drop_keys(client, book.keys.tag + ":*")


def bench_memory(tasks: int, config: list[str]) -> None:
    """Memory per finished task on a throwaway redis-server (so INFO sees only this),
    measured as ``bench_memory.py`` measures it (the indexes caught up)."""
    from bench_memory import measure  # a script beside this one, which imports this one

    with throwaway_redis(*config) as server:
        client = redis.Redis(port=server.port)
        per_task, kinds = measure(client, tasks, info=False)
        own = (kinds["task hash (t:)"] + kinds["history list (h:)"]) / tasks
        label = " ".join(config) or "default config"
        print(
            f"memory per finished task with 5 events ({label}): {per_task:,.0f} B "
            f"by INFO over {tasks:,} tasks (Celery-style 43-char id; its record with its 5 "
            f"callback markers, history, indexes, outbox entry); MEMORY USAGE of the task's "
            f"own keys {own:,.0f} B (bench_memory.py breaks it down)"
        )
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default="redis://127.0.0.1:6379/12")
    parser.add_argument("--ops", type=int, default=6000)
    args = parser.parse_args()
    client = redis.Redis.from_url(args.url)
    book = RedisBook(
        client, namespace=f"bench-{uuid.uuid4().hex[:8]}", retention=timedelta(hours=24)
    )
    try:
        bench_apply_vs_evalsha(client, book, args.ops)
        bench_apply_many(client, book, 2000)
        bench_resume(client, book)
        bench_memory(10_000, [])
    finally:
        drop_keys(client, book.keys.tag + ":*")


if __name__ == "__main__":
    main()
