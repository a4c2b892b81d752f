"""Expiry lateness with asyncbook's tasks sharing a busy prefork worker.

Run:  .venv/bin/python bench/bench_busy_sweep.py [--url redis://127.0.0.1:6379/13]
      [--before DIR]   (DIR holds an older ``asyncbook/`` package to compare with)

A real ``celery worker --pool=prefork -c 2`` (Celery's default prefetch) is kept busy by
a backlog of 30 s of work (twelve 5 s tasks); every second for ``--rounds`` seconds the
benchmark publishes four tracked probes with a 2 s ttl to the same queue (they wait
behind the backlog) and one to a queue nobody consumes. Lateness = when the expiry
notification was written (its outbox stream id is a Redis timestamp) minus the task's
deadline. Target: p99 <= 1.5 s with no ``beat_schedule`` written by the user.

Scenarios, interleaved in one run (each its own namespace and queues):
- ``before, README schedule``: the older code, the app writes the README's
  ``beat_schedule``, ``worker -B -Q q,q-asyncbook`` (asyncbook's queue on the busy worker).
- ``after, no schedule, -Q q``: this code, no ``beat_schedule``, no beat, only the
  user's queue: the worker's main process sweeps.
- ``before, no schedule``: the older code without the README's ``beat_schedule``.
- ``after, README command``: this code, ``-B -Q q,q-asyncbook`` as the first.
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
from dataclasses import dataclass
from pathlib import Path

import redis
from _servers import drop_keys

from asyncbook import RedisBook

ROOT = Path(__file__).resolve().parent.parent
BACKLOG = 12
"""5 s tasks queued first: 30 s of work for two pool processes."""


@dataclass(frozen=True)
class Scenario:
    name: str
    before: bool
    schedule: bool
    beat: bool
    asyncbook_queue: bool


SCENARIOS = [
    Scenario("before, README schedule, -B -Q q,q-asyncbook", True, True, True, True),
    Scenario("after, no schedule, no beat, -Q q", False, False, False, False),
    Scenario("before, no schedule, -B -Q q,q-asyncbook", True, False, True, True),
    Scenario("after, no schedule, -B -Q q,q-asyncbook", False, False, True, True),
]


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))]


def run(scenario: Scenario, url: str, before: Path | None, rounds: int) -> str:
    if scenario.before and before is None:
        return f"{scenario.name}: skipped (no --before)"
    tag = uuid.uuid4().hex[:8]
    namespace, queue = f"bench-busy-{tag}", f"bench-busy-{tag}"
    code = before if scenario.before else ROOT
    env = {
        **os.environ,
        "BENCH_REDIS_URL": url,
        "BENCH_NAMESPACE": namespace,
        "BENCH_QUEUE": queue,
        "BENCH_SCHEDULE": "1" if scenario.schedule else "0",
        "PYTHONPATH": os.pathsep.join([str(code), str(ROOT / "bench")]),
    }
    os.environ.update({k: env[k] for k in ("BENCH_REDIS_URL", "BENCH_NAMESPACE", "BENCH_QUEUE")})
    sys.modules.pop("busy_sweep_app", None)
    sys.path.insert(0, str(ROOT / "bench"))
    import busy_sweep_app as bench_app

    book = RedisBook.from_url(url, namespace=namespace)
    queues = f"{queue},{queue}-asyncbook" if scenario.asyncbook_queue else queue
    with tempfile.TemporaryDirectory() as tmp:
        ready = Path(tmp) / "ready"
        env["BENCH_READY_FILE"] = str(ready)
        command = [
            sys.executable, "-m", "celery", "-A", "busy_sweep_app", "worker",
            "--pool=prefork", "-c", "2", "-Q", queues, "-n", f"{queue}@localhost",
            "--without-gossip", "--without-mingle", "-l", "warning",
        ]  # fmt: skip
        if scenario.beat:
            command += ["-B", "-s", str(Path(tmp) / "beat")]
        with (Path(tmp) / "worker.log").open("wb") as log:
            worker = subprocess.Popen(command, cwd=tmp, env=env, stdout=log, stderr=log)
        try:
            while not ready.exists():
                if worker.poll() is not None:
                    raise SystemExit((Path(tmp) / "worker.log").read_text())
                time.sleep(0.05)
            time.sleep(2.0)  # beat's first tick, the pool up
            for _ in range(BACKLOG):
                bench_app.busy.delay(5.0)
            ids: list[str] = []
            orphans: list[str] = []
            for _ in range(rounds):
                ids += [bench_app.probe.delay().id for _ in range(4)]
                orphans.append(bench_app.probe.apply_async(queue=f"{queue}-nobody").id)
                time.sleep(1.0)
            deadlines = {}
            for task_id in ids + orphans:
                task = book.get(task_id)
                assert task is not None, task_id
                deadlines[task_id] = task.expires_at_ms
            written: dict[str, int] = {}
            give_up = time.monotonic() + 45
            while len(written) < len(deadlines) and time.monotonic() < give_up:
                for entry_id, note in book.consume_notifications("bench", "bench", 1000, 500):
                    if note.task_id in deadlines:
                        written[note.task_id] = int(entry_id.split("-", 1)[0])
        finally:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(timeout=60)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
            drop_keys(book.client, f"*{tag}*")
            bench_app.app.close()
    parts = []
    for label, group in (("behind the backlog", ids), ("on a queue nobody consumes", orphans)):
        late = [(written[i] - deadlines[i]) / 1000 for i in group if i in written]
        if not late:
            parts.append(f"{label}: 0/{len(group)} expired within 45 s")
            continue
        parts.append(
            f"{label}: {len(late)}/{len(group)} expired, p50 {percentile(late, 0.5):.2f} s, "
            f"p99 {percentile(late, 0.99):.2f} s, max {max(late):.2f} s"
        )
    return f"{scenario.name}\n  " + "\n  ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="redis://127.0.0.1:6379/13")
    parser.add_argument("--before", type=Path, default=None, help="an older asyncbook tree")
    parser.add_argument("--rounds", type=int, default=25, help="seconds of probes")
    args = parser.parse_args()
    redis.Redis.from_url(args.url).ping()
    for scenario in SCENARIOS:
        print(run(scenario, args.url, args.before, args.rounds), flush=True)


if __name__ == "__main__":
    main()
