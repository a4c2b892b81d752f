"""Redis's instructions per lifecycle, asyncbook against BullMQ 5, counted by callgrind.

Run (needs valgrind, node and npm; BullMQ is installed as ``bench_peers.py`` does)::

    .venv/bin/python bench/bench_peers_instructions.py [-n 200]

``bench_peers.py`` measures Redis's CPU time, which moves by up to 2x between rounds on a
shared machine. This runs the same lifecycles (``AsyncbookSide``, ``BullmqSide``) against
one private ``redis-server`` under ``valgrind --tool=callgrind`` and reads the number of
instructions the server executed for each side's ``-n`` lifecycles (``callgrind_control``
zeroes the count before and dumps it after). The count is the same from run to run
whatever else the machine does, so a change of a few per cent shows. It counts the
server's user-space work only: the kernel's share of a round trip (the same per round trip
on both sides, and both make the same number) is not in it. A breakdown of asyncbook's
share follows: an EVALSHA of ``return 1`` with the same KEYS and ARGV (``FloorSide``), and
the same with the scripts' shared helpers in front of ``return 1``.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import redis
from _servers import Server, throwaway_redis
from bench_peers import DEFAULT_DIR, AsyncbookSide, BullmqSide, FloorSide, bullmq_folder
from bench_script_keys import Counter

from asyncbook.redis._scripts import with_helpers


class Callgrind:
    """A redis-server under callgrind; ``count(run)`` is the instructions ``run`` cost it."""

    def __init__(self, server: Server, dumps: str) -> None:
        self.server, self.dumps = server, dumps
        self.port, self.url = server.port, server.url

    def control(self, flag: str) -> None:
        pid = str(self.server.process.pid)
        subprocess.run(["callgrind_control", flag, pid], capture_output=True)

    def count(self, run: Callable[[], object]) -> int:
        self.control("-z")
        run()
        self.control("-d")
        time.sleep(0.3)
        dump = max(glob.glob(f"{self.dumps}/cg.*.*"), key=os.path.getmtime)
        found = re.search(r"^(?:summary|totals): (\d+)", Path(dump).read_text(), re.M)
        assert found is not None, dump
        return int(found.group(1))


@contextmanager
def callgrind(*config: str) -> Iterator[Callgrind]:
    """A throwaway redis-server with ``config`` under ``valgrind --tool=callgrind``."""
    with tempfile.TemporaryDirectory() as dumps:
        wrapper = ("valgrind", "--tool=callgrind", f"--callgrind-out-file={dumps}/cg.%p")
        with throwaway_redis(*config, wrapper=wrapper, seconds=30) as server:
            yield Callgrind(server, dumps)


def measured(grind: Callgrind, side: object, progress: bool, n: int, warm: int = 1) -> float:
    """Instructions per lifecycle of ``side`` (a ``bench_peers`` driver), after ``warm``
    lifecycles (scripts loaded, queues made; more: its keys grown past a listpack's size)."""
    rounds: Callable[[bool], AbstractContextManager[Callable[[int], int]]]
    rounds = side.round  # type: ignore[attr-defined]
    with rounds(progress) as run:
        run(warm)
        return grind.count(lambda: run(n)) / n


@contextmanager
def helpers_floor(url: str, calls: list[tuple[int, list[object]]]) -> Iterator[Callable[[], None]]:
    """One lifecycle's EVALSHAs with the shared helpers in front of ``return 1``."""
    client = redis.Redis.from_url(url)
    sha = client.script_load(with_helpers("return 1"))
    try:
        yield lambda: [client.evalsha(sha, count, *args) for count, args in calls]  # type: ignore[func-returns-value]
    finally:
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=200, help="lifecycles per side and scenario")
    parser.add_argument("--bullmq-dir", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--warm", type=int, default=1, help="lifecycles before the count")
    options = parser.parse_args()
    tools = ("node", "npm", "valgrind", "callgrind_control", "redis-server")
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        print(f"bench_peers_instructions needs {', '.join(missing)} on PATH", file=sys.stderr)
        raise SystemExit(2)
    version = bullmq_folder(options.bullmq_dir)
    with callgrind() as grind:
        bull = BullmqSide(options.bullmq_dir, grind.port)
        try:
            trips = Counter()
            book = AsyncbookSide(grind.url, trips)
            floor = FloorSide(grind.url, trips, book)
            print(f"BullMQ {version}; {options.n} lifecycles per side; instructions per lifecycle")
            print("\n| scenario | asyncbook | BullMQ | ratio | floor | floor + helpers |")
            print("|---|---|---|---|---|---|")
            for progress in (False, True):
                ours = measured(grind, book, progress, options.n, options.warm)
                theirs = measured(grind, bull, progress, options.n, options.warm)
                bare = measured(grind, floor, progress, options.n)
                with helpers_floor(grind.url, book.calls) as call:
                    call()
                    helpers = grind.count(lambda: [call() for _ in range(options.n)]) / options.n
                name = "with a progress" if progress else "plain"
                print(
                    f"| {name} | {ours:,.0f} | {theirs:,.0f} | {ours / theirs:.2f} | "
                    f"{bare:,.0f} | {helpers:,.0f} |",
                    flush=True,
                )
        finally:
            bull.close()


if __name__ == "__main__":
    main()
