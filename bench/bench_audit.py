"""Audit benchmark: what recording who cancelled costs a cancel.

Run:  .venv/bin/python bench/bench_audit.py [--redis-url URL] [--tasks 2000] [--rounds 5]

On the Redis at ``--redis-url`` (a fresh namespace, removed afterwards): each round creates
``--tasks`` queued tasks, then cancels half without an actor (``apply.lua``, as before) and
half with one (``cancel.lua``: the cancel and its audit entry in one script call), the two
interleaved one by one. Reported: the median over rounds of the time per cancel each way
and their ratio, and the commands the client sends per cancel each way (its round trips).
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

import redis
from _servers import drop_keys

from asyncbook import RedisBook


def _round_trips(book: RedisBook, actor: str | None, count: int) -> float:
    """Commands the client sends per cancel (each its own round trip here), counted on
    the client: the shared Redis's own statistics see every other client too."""
    ids = [f"rt-{actor}-{n}" for n in range(count)]
    for task_id in ids:
        book.create(id=task_id, now_ms=book.now_ms(), ttl_ms=3_600_000, max_attempts=1)
    sent: list[object] = []
    original = book.client.execute_command

    def counted(*args: object, **options: object) -> object:
        sent.append(args[0])
        return original(*args, **options)

    book.client.execute_command = counted  # type: ignore[method-assign]
    try:
        for task_id in ids:
            book.cancel(task_id, "bench", actor=actor)
    finally:
        del book.client.execute_command
    return len(sent) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/12")
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    client = redis.Redis.from_url(options.redis_url)
    book = RedisBook(client, namespace=f"bench-audit-{uuid.uuid4().hex[:8]}")
    plain: list[float] = []
    audited: list[float] = []
    try:
        for round_number in range(options.rounds):
            ids = [f"r{round_number}-{n}" for n in range(options.tasks)]
            for task_id in ids:
                book.create(id=task_id, now_ms=book.now_ms(), ttl_ms=3_600_000, max_attempts=1)
            spent = {None: 0.0, "bench-operator": 0.0}
            for n, task_id in enumerate(ids):
                actor = None if n % 2 == 0 else "bench-operator"
                start = time.perf_counter()
                book.cancel(task_id, "bench", actor=actor)
                spent[actor] += time.perf_counter() - start
            half = options.tasks / 2
            plain.append(spent[None] / half)
            audited.append(spent["bench-operator"] / half)
        print(f"cancels per round: {options.tasks} (half each way), rounds: {options.rounds}")
        print(f"without an actor: {statistics.median(plain) * 1e6:.0f} µs per cancel")
        print(f"with an actor (audited): {statistics.median(audited) * 1e6:.0f} µs per cancel")
        ratios = [a / p for a, p in zip(audited, plain, strict=True)]
        print(f"time ratio audited / plain: {statistics.median(ratios):.2f} (median of rounds)")
        print(f"round trips per cancel, plain: {_round_trips(book, None, 200):.2f}")
        print(f"round trips per cancel, audited: {_round_trips(book, 'ops', 200):.2f}")
        print(f"audit log length: {book.client.xlen(book.keys.audit_log)} (capped near 10,000)")
    finally:
        drop_keys(client, book.keys.tag + "*")
        client.close()


if __name__ == "__main__":
    main()
