"""asyncbook against a peer, BullMQ 5: Redis CPU, script time and commands per lifecycle.

Run (starts its own redis-server on a free loopback port; installs BullMQ 5 with npm into
``--bullmq-dir``, outside the repository, the first time)::

    .venv/bin/python bench/bench_peers.py [--rounds 3] [-n 3000] [--scenario both] [--floor]

A lifecycle is, on asyncbook's side, what the Celery integration writes for one task:
``create`` (with the publisher's info), ``apply`` of a start, [a progress of 50,] and a
succeed with its result reference and hash, each with its callback id, from one Python
thread, one call at a time, on a ``RedisBook`` with the default 24 h retention (a fresh
namespace per round, deleted after it). On BullMQ's side (bench/peers_bullmq.mjs, on
node) it is ``queue.add(name, data, {removeOnComplete: true})`` (the events stream left
at its default), ``worker.getNextJob(token)`` of a Worker that does not run its own loop
(the fetch its loop makes: moveToActive), [``job.updateProgress(50)``,] and
``job.moveToCompleted(result, token, false)``: the manual loop, one lifecycle at a time,
a fresh queue per round, obliterated after it. Each side warms its book or queue with
one lifecycle before its window.

Each side's window is bracketed by ``INFO cpu`` and ``INFO commandstats`` on the one
server; the sides alternate round by round (their order rotates). Per lifecycle:
the server's CPU (``used_cpu_sys + used_cpu_user``), the outer scripts' time
(EVALSHA, EVAL, FCALL usec), the commands the server ran (every ``calls``, those inside
scripts included, INFO left out) and the client's round trips (asyncbook: redis-py sends;
BullMQ: socket writes to Redis, a pipeline being one). ``--floor`` adds a third side:
EVALSHA of ``return 1`` with the KEYS and ARGV of each of asyncbook's calls in one
lifecycle (the cost of just calling that many scripts with that many arguments).
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import redis
from _servers import drop_keys, throwaway_redis  # scripts beside this one
from bench_script_keys import Counter

from asyncbook import ProgressEvent, PublishInfo, RedisBook, StartEvent, SucceedEvent

SCRIPTS = ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_fcall")
DRIVER = Path(__file__).with_name("peers_bullmq.mjs")
DEFAULT_DIR = Path.home() / ".cache" / "asyncbook-bench" / "bullmq"
INFO = PublishInfo(name="resize", args="(42, 'thumb')", kwargs="{'size': 256}", queue="celery")
HASH = "sha256:" + "ab" * 32
Call = tuple[int, list[Any]]  # an EVALSHA's number of keys, then its keys and args


@dataclass
class Sample:
    cpu_us: float
    script_us: float
    commands: float
    trips: float


@dataclass
class Side:
    label: str
    samples: dict[str, list[Sample]] = field(default_factory=dict)


def snapshot(stats: redis.Redis) -> tuple[float, float, int]:
    cpu: dict[str, Any] = stats.info("cpu")
    commands: dict[str, Any] = stats.info("commandstats")
    used = float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"])
    scripts = sum(float(commands[k]["usec"]) for k in SCRIPTS if k in commands)
    calls = sum(int(v["calls"]) for k, v in commands.items() if k != "cmdstat_info")
    return used, scripts, calls


def measured(stats: redis.Redis, n: int, run: Callable[[], int]) -> Sample:
    """``run`` (n lifecycles, returns its round trips) between two INFO snapshots."""
    cpu0, script0, calls0 = snapshot(stats)
    trips = run()
    cpu1, script1, calls1 = snapshot(stats)
    return Sample(
        (cpu1 - cpu0) * 1e6 / n, (script1 - script0) / n, (calls1 - calls0) / n, trips / n
    )


class AsyncbookSide:
    def __init__(self, url: str, trips: Counter) -> None:
        self.url, self.trips = url, trips
        self.calls: list[Call] = []  # one lifecycle's EVALSHAs, for the floor

    @staticmethod
    def created(book: RedisBook) -> tuple[str, int, str, StartEvent]:
        """A life's create, as a publisher sends it: the task's id, the time, a nonce for
        the callback ids, and its start."""
        task_id = str(uuid.uuid4())
        now = int(time.time() * 1000)
        book.create(
            id=task_id, now_ms=now, ttl_ms=3_600_000, max_attempts=4, exist_ok=True,
            heartbeat_timeout_ms=60_000, info=INFO,
        )  # fmt: skip
        return task_id, now, uuid.uuid4().hex[:8], StartEvent(at_ms=now + 1, worker="celery@bench")

    @staticmethod
    def lifecycle(book: RedisBook, progress: bool) -> None:
        task_id, now, nonce, start = AsyncbookSide.created(book)
        book.apply(task_id, start, f"celery:{task_id}:start:0:{nonce}")
        if progress:
            event = ProgressEvent(at_ms=now + 2, progress=50, cursor="chunk-5")
            book.apply(task_id, event, f"celery:{task_id}:progress:0:50:{nonce}")
        ref = f"celery-task-meta-{task_id}"
        done = SucceedEvent(at_ms=now + 3, result_ref=ref, result_hash=HASH)
        book.apply(task_id, done, f"celery:{task_id}:success:0")

    @contextmanager
    def round(self, progress: bool) -> Iterator[Callable[[int], int]]:
        book = RedisBook.from_url(
            self.url, namespace=f"bench-peers-{uuid.uuid4().hex[:8]}", retention=timedelta(hours=24)
        )
        book.check_server()
        self.capture(book, progress)

        def run(n: int) -> int:
            before = self.trips.trips
            for _ in range(n):
                self.lifecycle(book, progress)
            return self.trips.trips - before

        try:
            yield run
        finally:
            drop_keys(book.client, book.keys.tag + ":*")
            book.client.close()

    def capture(self, book: RedisBook, progress: bool) -> None:
        """One lifecycle (the round's warm-up), its script calls kept (EVALSHA, FCALL)."""
        client: Any = book.client
        execute = client.execute_command
        calls: list[Call] = []

        def recorded(*args: Any, **options: Any) -> Any:
            if args and args[0] in ("EVALSHA", "FCALL", "FCALL_RO"):
                calls.append((int(args[2]), list(args[3:])))
            return execute(*args, **options)

        client.execute_command = recorded
        try:
            self.lifecycle(book, progress)
        finally:
            del client.execute_command
        self.calls = calls


class FloorSide:
    """EVALSHA of ``return 1`` with the KEYS and ARGV of asyncbook's calls."""

    def __init__(self, url: str, trips: Counter, source: AsyncbookSide) -> None:
        self.url, self.trips, self.source = url, trips, source

    @contextmanager
    def round(self, progress: bool) -> Iterator[Callable[[int], int]]:
        client = redis.Redis.from_url(self.url)
        sha = client.script_load("return 1")
        book = RedisBook(client, namespace="bench-peers-floor")
        self.source.capture(book, progress)
        calls = self.source.calls
        drop_keys(client, book.keys.tag + ":*")

        def run(n: int) -> int:
            before = self.trips.trips
            for _ in range(n):
                for keys, rest in calls:
                    client.evalsha(sha, keys, *rest)
            return self.trips.trips - before

        try:
            yield run
        finally:
            client.close()


class BullmqSide:
    def __init__(self, folder: Path, port: int) -> None:
        self.node = subprocess.Popen(
            ["node", str(DRIVER), str(folder), str(port)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.read()

    def read(self) -> dict[str, Any]:
        assert self.node.stdout is not None
        line = self.node.stdout.readline()
        if not line:
            raise RuntimeError("the BullMQ driver exited")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"BullMQ driver: {answer['error']}")
        return answer

    def ask(self, **command: Any) -> dict[str, Any]:
        assert self.node.stdin is not None
        self.node.stdin.write(json.dumps(command) + "\n")
        self.node.stdin.flush()
        return self.read()

    @contextmanager
    def round(self, progress: bool) -> Iterator[Callable[[int], int]]:
        self.ask(op="prepare", queue=f"bench-peers-{uuid.uuid4().hex[:8]}")
        try:
            yield lambda n: int(self.ask(op="run", n=n, progress=progress)["writes"])
        finally:
            self.ask(op="cleanup")

    def close(self) -> None:
        try:
            self.ask(op="quit")
            self.node.wait(10)
        finally:
            if self.node.poll() is None:
                self.node.terminate()
                self.node.wait(10)


def bullmq_folder(folder: Path) -> str:
    """The BullMQ 5 installed in ``folder`` (installed there first if absent): its version."""
    manifest = folder / "node_modules" / "bullmq" / "package.json"
    if not manifest.exists() or not json.loads(manifest.read_text())["version"].startswith("5."):
        folder.mkdir(parents=True, exist_ok=True)
        print(f"installing bullmq@5 into {folder} ...", flush=True)
        subprocess.run(
            ["npm", "install", "--no-save", "--no-audit", "--no-fund", "--prefix", str(folder),
             "bullmq@5"],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
    return str(json.loads(manifest.read_text())["version"])


def spread(values: list[float], digits: int = 1) -> str:
    rounds = ", ".join(f"{v:.{digits}f}" for v in values)
    return f"{statistics.median(values):.{digits}f} ({rounds})"


def report(scenario: str, sides: list[Side]) -> None:
    print(f"\n### {scenario}: per lifecycle, median (per round)\n")
    print("| side | Redis CPU µs | script µs | commands | round trips |")
    print("|---|---|---|---|---|")
    for side in sides:
        rows = side.samples[scenario]
        print(
            f"| {side.label} | {spread([r.cpu_us for r in rows])} | "
            f"{spread([r.script_us for r in rows])} | {spread([r.commands for r in rows])} | "
            f"{spread([r.trips for r in rows])} |"
        )
    book, bull = sides[0].samples[scenario], sides[1].samples[scenario]
    ratios = [a.cpu_us / b.cpu_us for a, b in zip(book, bull, strict=True)]
    print(f"\nRedis CPU asyncbook ÷ BullMQ: {spread(ratios, 2)} (target <= 1.0)")
    if len(sides) > 2:
        floor = sides[2].samples[scenario]
        ratios = [a.cpu_us / b.cpu_us for a, b in zip(book, floor, strict=True)]
        print(f"Redis CPU asyncbook ÷ floor (EVALSHA of return 1): {spread(ratios, 2)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("-n", type=int, default=3000, help="lifecycles per side and round")
    parser.add_argument("--scenario", choices=("plain", "progress", "both"), default="both")
    parser.add_argument("--floor", action="store_true", help="also EVALSHA of 'return 1'")
    parser.add_argument("--bullmq-dir", type=Path, default=DEFAULT_DIR)
    options = parser.parse_args()
    missing = [tool for tool in ("node", "npm", "redis-server") if shutil.which(tool) is None]
    if missing:
        print(f"bench_peers needs {' and '.join(missing)} on PATH: not found", file=sys.stderr)
        raise SystemExit(2)
    scenarios = ["plain", "progress"] if options.scenario == "both" else [options.scenario]
    version = bullmq_folder(options.bullmq_dir)
    node = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    with throwaway_redis() as server:
        url, port = server.url, server.port
        stats = redis.Redis.from_url(url)
        print(
            f"Redis {stats.info('server')['redis_version']} (private, port {port}), "
            f"BullMQ {version} on node {node}; {options.rounds} rounds of {options.n} "
            f"lifecycles per side", flush=True,
        )  # fmt: skip
        trips = Counter()
        book = AsyncbookSide(url, trips)
        bull = BullmqSide(options.bullmq_dir, port)
        drivers: list[Any] = [book, bull] + ([FloorSide(url, trips, book)] if options.floor else [])
        sides = [Side("asyncbook"), Side(f"BullMQ {version}"), Side("floor: EVALSHA return 1")]
        try:
            for number in range(options.rounds):
                for scenario in scenarios:
                    order = list(range(len(drivers)))
                    order = order[number % len(order) :] + order[: number % len(order)]
                    for index in order:
                        with drivers[index].round(scenario == "progress") as run:
                            sample = measured(stats, options.n, functools.partial(run, options.n))
                        sides[index].samples.setdefault(scenario, []).append(sample)
                print(f"round {number + 1} done", flush=True)
        finally:
            bull.close()
            stats.close()
    for scenario in scenarios:
        report(scenario, sides[: len(drivers)])


if __name__ == "__main__":
    main()
