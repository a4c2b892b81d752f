"""Redis's instructions per create of ``create_many`` and per event of ``apply_many``
(batches of 100), counted by callgrind on a private ``redis-server`` (issue 32).

Run (needs valgrind)::

    .venv/bin/python bench/bench_batch_instructions.py [-n 400]
"""

from __future__ import annotations

import argparse
import uuid

from bench_peers_instructions import callgrind

from asyncbook import CreateSpec, RedisBook, StartEvent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=400, help="tasks (a multiple of 100)")
    n = parser.parse_args().n
    with callgrind() as grind:
        book = RedisBook.from_url(grind.url, namespace=f"bench-{uuid.uuid4().hex[:8]}")
        book.create_many([CreateSpec("warm", 0, 10**12, 1)])  # scripts loaded
        book.apply_many([("warm", StartEvent(at_ms=1, worker="w"), None)])
        specs = [CreateSpec(f"t{i}", 0, 10**12, 1) for i in range(n)]
        items = [(f"t{i}", StartEvent(at_ms=1, worker="w"), None) for i in range(n)]
        creates = grind.count(
            lambda: [book.create_many(specs[a : a + 100]) for a in range(0, n, 100)]
        )
        events = grind.count(
            lambda: [book.apply_many(items[a : a + 100], full_task=False) for a in range(0, n, 100)]
        )
        print(f"create_many: {creates / n:,.0f} a create; apply_many: {events / n:,.0f} an event")


if __name__ == "__main__":
    main()
