"""Redis's instructions per task life with the console's indexes off the write path (issue
32): the writes' share and the indexer's amortised share, counted by callgrind.

Run (needs valgrind and redis-server)::

    .venv/bin/python bench/bench_visibility.py [-n 200]

The same lifecycle as ``bench_peers_instructions.py`` (``AsyncbookSide.lifecycle``: create,
start, succeed, optionally one progress report), against one private ``redis-server``
under ``valgrind --tool=callgrind``: first the ``-n`` lives (the writes), then one
``catch_up_index()`` that indexes their changes (the indexer, divided by ``-n``); the
server runs with ``--hz 1``, so that its timers, which run by the clock, weigh little. On a
book without an indexer (before issue 32) the second count is 0: the writes did it all.
Run it on two checkouts (``PYTHONPATH=<checkout>``) to compare them.

Two more scenarios write the same life the way the Celery integration writes it, with
compact answers (no task JSON, no history read back): ``recorder`` sends the start and the
end each by ``apply_many(full_task=False)`` (the worker's recorder, when the start does
not ride with the result); ``result backend`` sends the start and the end together, with
Celery's result meta, in one call of the result backend's script (``execution.lua``, by
``apply_in_script``: its usual path). ``--celery-only`` runs just those.

``--warm N`` writes and indexes N lives before the count (default 1: the scripts loaded).
On a fresh namespace every index, the deadlines and the stall clock start empty, and a
sorted set of up to 128 members is a listpack, whose inserts scan it; ``--warm 1000``
counts a book that already holds tasks, as a running one does.
"""

from __future__ import annotations

import argparse
import json
import uuid
from collections.abc import Callable
from datetime import timedelta

from bench_peers import HASH, AsyncbookSide
from bench_peers_instructions import callgrind

from asyncbook import RedisBook, SucceedEvent
from asyncbook.celery._backend import _execution_source
from asyncbook.celery._execution_args import ExecutionArgs


def celery_life(book: RedisBook, fused: bool) -> tuple[str, str]:
    """A life as the Celery integration writes it: the publisher's create, then the
    worker's start and end with compact answers (``fused``: with the meta, in one call of
    the result backend's script; else two ``apply_many`` calls, as the recorder sends).
    Returns the task's id and the nonce of its callback ids."""
    task_id, now, nonce, start = AsyncbookSide.created(book)
    meta_key = f"celery-task-meta-{task_id}"
    done = SucceedEvent(at_ms=now + 3, result_ref=meta_key, result_hash=HASH)
    start_id, done_id = f"celery:{task_id}:start:0:{nonce}", f"celery:{task_id}:success:0"
    if not fused:
        book.apply_many([(task_id, start, start_id)], full_task=False)
        book.apply_many([(task_id, done, done_id)], full_task=False)
        return task_id, nonce
    meta = {"status": "SUCCESS", "result": 42, "traceback": None, "children": [],
            "date_done": "2026-12-07T12:00:00.000000", "task_id": task_id}  # fmt: skip
    args = ExecutionArgs(json.dumps(meta), 86_400, "json", "|expired|cancelled|").argv()
    script = book.events_script(_execution_source())
    book.apply_in_script(
        task_id, [(start, start_id), (done, done_id)], script, book.keys.task(meta_key), args
    )
    return task_id, nonce


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=200, help="lifecycles per scenario")
    parser.add_argument("--celery-only", action="store_true", help="the Celery paths only")
    parser.add_argument(
        "--warm", type=int, default=1, help="lives written and indexed before the count"
    )
    options = parser.parse_args()
    n = options.n
    # hz 1: the server's timers (expiry sampling, client crons) run once a second, so
    # a count moves little with how long a loaded machine takes to run the lives.
    with callgrind("--hz", "1") as grind:
        print(f"{n} lifecycles per scenario; instructions in Redis per lifecycle")
        print("\n| scenario | writes | indexer | total |")
        print("|---|---|---|---|")
        lives: list[tuple[str, Callable[[RedisBook], None]]] = [
            ("plain", lambda book: AsyncbookSide.lifecycle(book, False)),
            ("with a progress", lambda book: AsyncbookSide.lifecycle(book, True)),
        ]
        lives = lives[2:] if options.celery_only else lives
        lives += [
            ("recorder (compact answers)", lambda book: celery_life(book, False)),
            ("result backend (start and end in one call)", lambda book: celery_life(book, True)),
        ]
        for name, life in lives:
            book = RedisBook.from_url(
                grind.url,
                namespace=f"bench-vis-{uuid.uuid4().hex[:8]}",
                retention=timedelta(hours=24),
            )
            book.check_server()
            index = getattr(book, "catch_up_index", lambda **_: None)
            for _ in range(options.warm):
                life(book)  # warm: scripts loaded (and, with --warm N, the keys grown)
            index(batches=1_000)

            def run(book: RedisBook = book, life: Callable[[RedisBook], None] = life) -> None:
                for _ in range(n):
                    life(book)

            writes = grind.count(run) / n
            indexer = grind.count(lambda index=index: index(batches=1_000)) / n
            total = writes + indexer
            print(f"| {name} | {writes:,.0f} | {indexer:,.0f} | {total:,.0f} |", flush=True)
            book.client.close()


if __name__ == "__main__":
    main()
