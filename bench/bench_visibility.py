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
"""

from __future__ import annotations

import argparse
import uuid
from datetime import timedelta

from bench_peers import AsyncbookSide
from bench_peers_instructions import callgrind

from asyncbook import RedisBook


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=200, help="lifecycles per scenario")
    options = parser.parse_args()
    n = options.n
    # hz 1: the server's timers (expiry sampling, client crons) run once a second, so
    # a count moves little with how long a loaded machine takes to run the lives.
    with callgrind("--hz", "1") as grind:
        print(f"{n} lifecycles per scenario; instructions in Redis per lifecycle")
        print("\n| scenario | writes | indexer | total |")
        print("|---|---|---|---|")
        for progress in (False, True):
            book = RedisBook.from_url(
                grind.url,
                namespace=f"bench-vis-{uuid.uuid4().hex[:8]}",
                retention=timedelta(hours=24),
            )
            book.check_server()
            index = getattr(book, "catch_up_index", lambda **_: None)
            AsyncbookSide.lifecycle(book, progress)  # warm: scripts loaded
            index(batches=1_000)

            def lives(book: RedisBook = book, progress: bool = progress) -> None:
                for _ in range(n):
                    AsyncbookSide.lifecycle(book, progress)

            writes = grind.count(lives) / n
            indexer = grind.count(lambda index=index: index(batches=1_000)) / n
            name = "with a progress" if progress else "plain"
            total = writes + indexer
            print(f"| {name} | {writes:,.0f} | {indexer:,.0f} | {total:,.0f} |", flush=True)
            book.client.close()


if __name__ == "__main__":
    main()
