"""The fault suite: a real prefork worker (acks_late) while the book's Redis fails.

The book lives on a Redis of its own (a loopback ``redis-server`` with an AOF, started
and stopped by PID); Celery's broker and results stay on the main Redis, so Celery keeps
working while the book does not. Each scenario publishes tracked tasks that report
progress, breaks the book's Redis once, waits for Celery's results, then checks the
book: every task Celery saw succeed must be ``succeeded`` there (an on-time result lost
otherwise), with every event it sent (start, one progress per chunk, succeed).

    .venv/bin/python bench/fault_suite.py            # all scenarios, a Markdown table
    .venv/bin/python bench/fault_suite.py --only stop-12s-at-start

Results and what they mean: docs/faults.md.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from _servers import free_port, start_redis, stop_process
from celery import Celery
from celery.result import AsyncResult

from asyncbook import RedisBook

HERE = Path(__file__).resolve().parent
BROKER_URL = os.environ.get("FAULT_BROKER_URL", "redis://127.0.0.1:6379/14")


@dataclass(frozen=True)
class Shape:
    """How many tasks, of how many chunks of how many seconds."""

    tasks: int = 8
    steps: int = 10
    delay: float = 0.3


SHORT = Shape()
LONG = Shape(tasks=4, steps=15, delay=1.0)
"""Outlives the 12 s outage: a start sent as it begins must survive until the success."""
RESULTS = Celery("fault_suite", broker=BROKER_URL, backend=BROKER_URL)


class BookServer:
    """A redis-server for the book on a loopback port, with an AOF so a restart keeps data."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = start_redis(
            self.port, self.folder, "--appendonly", "yes", "--appendfsync", "always",
            "--save", "", seconds=20,
        )  # fmt: skip

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process, 20)
            self.process = None

    def pause(self, seconds: float) -> None:
        """SIGSTOP: a Redis that hangs (accepts nothing, answers nothing) for ``seconds``."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)
        time.sleep(seconds)
        self.process.send_signal(signal.SIGCONT)


@dataclass
class Outcome:
    name: str
    fault: str
    tasks: int
    celery_succeeded: int
    book_succeeded: int
    results_lost: int
    events_expected: int
    events_missing: int
    seconds: float


def _worker(env: dict[str, str], folder: Path) -> subprocess.Popen[bytes]:
    ready = folder / "ready"
    env = {**env, "FAULT_READY_FILE": str(ready)}
    process = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "fault_app", "worker", "-P", "prefork",
         "-c", "4", "-Q", env["FAULT_QUEUE"], "--without-heartbeat", "--without-gossip",
         "--without-mingle", "-l", "warning"],
        cwd=HERE,
        env=env,
        stdout=open(folder / "worker.log", "wb"),  # noqa: SIM115 - closed with the process
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not ready.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the worker did not start; see {folder / 'worker.log'}")
        time.sleep(0.1)
    return process


def _publish(env: dict[str, str], shape: Shape) -> list[str]:
    """Publish the tasks from a process of their own (the publisher creates them in the book)."""
    code = (
        "import fault_app\n"
        f"ids = [fault_app.work.apply_async(({shape.steps}, {shape.delay})).id"
        f" for _ in range({shape.tasks})]\n"
        "print(' '.join(ids))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=HERE, env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.split()


def run(
    name: str, fault: str, inject: Callable[[BookServer, list[Any]], None], shape: Shape
) -> Outcome:
    folder = Path(tempfile.mkdtemp(prefix=f"asyncbook-fault-{name}-"))
    server = BookServer(folder)
    server.start()
    namespace, queue = f"fault-{uuid.uuid4().hex[:8]}", f"fault-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "FAULT_BROKER_URL": BROKER_URL,
        "FAULT_BOOK_URL": server.url,
        "FAULT_NAMESPACE": namespace,
        "FAULT_QUEUE": queue,
        "PYTHONPATH": os.pathsep.join([str(HERE), env_path(os.environ)]),
    }
    worker = _worker(env, folder)
    started = time.monotonic()
    if name in DOWN_AT_PUBLISH:
        server.stop()  # the publisher cannot create the tasks: the worker must
    try:
        results: list[Any] = [AsyncResult(task_id, app=RESULTS) for task_id in _publish(env, shape)]
        inject(server, results)
        states = []
        for result in results:
            try:
                result.get(timeout=120, propagate=False)
            finally:
                states.append(result.state)
        if server.process is None:
            server.start()
        book = RedisBook.from_url(server.url, namespace=namespace)
        settle = time.monotonic() + 60
        while time.monotonic() < settle:
            tasks = [book.get(r.id) for r in results]
            if all(t is not None and t.terminal for t in tasks):
                break
            time.sleep(0.2)
        tasks = [book.get(r.id) for r in results]
        expected = shape.tasks * (shape.steps + 2)
        recorded = sum(
            len([e for e in t.history if e.event.type in ("start", "progress", "succeed")])
            for t in tasks
            if t is not None
        )
        lost = sum(
            1
            for state, task in zip(states, tasks, strict=True)
            if state == "SUCCESS" and (task is None or task.state != "succeeded")
        )
        return Outcome(
            name=name,
            fault=fault,
            tasks=shape.tasks,
            celery_succeeded=states.count("SUCCESS"),
            book_succeeded=sum(1 for t in tasks if t is not None and t.state == "succeeded"),
            results_lost=lost,
            events_expected=expected,
            events_missing=max(0, expected - recorded),
            seconds=round(time.monotonic() - started, 1),
        )
    finally:
        stop_process(worker, 30)
        server.stop()


def env_path(environ: Any) -> str:
    return str(environ.get("PYTHONPATH", ""))


def stop_for(seconds: float, after: float) -> Callable[[BookServer, list[Any]], None]:
    def inject(server: BookServer, results: list[Any]) -> None:
        time.sleep(after)
        server.stop()
        time.sleep(seconds)
        server.start()

    return inject


def start_after(seconds: float) -> Callable[[BookServer, list[Any]], None]:
    def inject(server: BookServer, results: list[Any]) -> None:
        time.sleep(seconds)
        server.start()

    return inject


def pause_for(seconds: float, after: float) -> Callable[[BookServer, list[Any]], None]:
    def inject(server: BookServer, results: list[Any]) -> None:
        time.sleep(after)
        server.pause(seconds)

    return inject


def client_kills(times: int, every: float) -> Callable[[BookServer, list[Any]], None]:
    def inject(server: BookServer, results: list[Any]) -> None:
        admin = redis.Redis(port=server.port)
        for _ in range(times):
            time.sleep(every)
            admin.client_kill_filter(_type="normal", skipme=True)
        admin.close()

    return inject


def flushes(times: int, every: float) -> Callable[[BookServer, list[Any]], None]:
    """``FUNCTION FLUSH`` and ``SCRIPT FLUSH`` of the book's Redis, ``times`` times."""

    def inject(server: BookServer, results: list[Any]) -> None:
        admin = redis.Redis(port=server.port)
        for _ in range(times):
            time.sleep(every)
            admin.function_flush()
            admin.script_flush()
        admin.close()

    return inject


Inject = Callable[[BookServer, list[Any]], None]
SCENARIOS: dict[str, tuple[str, Inject, Shape]] = {
    "stop-3s-mid-run": ("book Redis stopped 3 s, 1.5 s into the run", stop_for(3, 1.5), SHORT),
    "stop-12s-at-start": ("book Redis stopped 12 s as the tasks start", stop_for(12, 0.0), SHORT),
    "stop-12s-long-tasks": ("the same, tasks of 15 s", stop_for(12, 0.0), LONG),
    "client-kill": ("CLIENT KILL of the book's clients, 6 times", client_kills(6, 0.5), SHORT),
    "hang-3s-mid-run": ("book Redis hung (SIGSTOP) 3 s, 1.5 s in", pause_for(3, 1.5), SHORT),
    "flush-scripts": ("FUNCTION FLUSH and SCRIPT FLUSH, 12 times, 0.25 s apart",
                      flushes(12, 0.25), SHORT),
    "stop-at-publish": ("book Redis stopped before the publish, started 15 s after it",
                        start_after(15), SHORT),
}  # fmt: skip
DOWN_AT_PUBLISH = {"stop-at-publish"}
"""Scenarios whose book is stopped before the tasks are published."""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(SCENARIOS), action="append")
    args = parser.parse_args(argv)
    names = args.only or list(SCENARIOS)
    print(f"prefork -c 4, acks_late; short: {SHORT}, long: {LONG}\n")
    print("| scenario | fault | Celery SUCCESS | book succeeded | on-time results lost "
          "| events expected | events missing | run (s) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for name in names:
        fault, inject, shape = SCENARIOS[name]
        o = run(name, fault, inject, shape)
        print(f"| {o.name} | {o.fault} | {o.celery_succeeded}/{o.tasks} | "
              f"{o.book_succeeded}/{o.tasks} | {o.results_lost} | {o.events_expected} | "
              f"{o.events_missing} | {o.seconds} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
