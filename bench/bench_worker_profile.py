"""Where a solo worker's CPU goes per task: by thread, and (``--profile``) by function.

Run:  PYTHONPATH=. .venv/bin/python bench/bench_worker_profile.py [--url redis://127.0.0.1:6379/13]
          [-n 3000] [--kind tracked|untracked] [--backend asyncbook+redis|redis] [--profile]

Publishes ``n`` no-op tasks of ``bench_celery_app`` (``bench.<kind>``) to a fresh queue
from a child process, then runs a solo worker on it in another child, as
``bench_backend.py`` does (result backend ``<backend>://``, the book in a fresh
namespace). From ``worker_ready`` to the ``n``-th ``task_postrun`` the worker counts each
thread's CPU (``/proc``); with ``--profile``, the main thread runs under ``cProfile``
(slower: compare its costs with each other, not with an unprofiled run) and the top
functions by own time are printed, per task.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import subprocess
import sys
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any

from _servers import drop_keys

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def thread_cpu() -> dict[int, float]:
    """CPU seconds of each thread of this process so far."""
    ticks, found = os.sysconf("SC_CLK_TCK"), {}
    for tid in os.listdir("/proc/self/task"):
        fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        found[int(tid)] = (int(fields[11]) + int(fields[12])) / ticks
    return found


def publish(kind: str, n: int, queue: str) -> None:
    import bench_celery_app

    task = bench_celery_app.app.tasks[f"bench.{kind}"]
    for _ in range(n):
        task.apply_async(queue=queue)  # the creates left are flushed at exit


def work(n: int, queue: str, out_dir: str, profile: bool) -> None:
    import bench_celery_app
    from celery import signals

    profiler = cProfile.Profile() if profile else None
    ids: list[str] = []
    began: dict[int, float] = {}

    @signals.worker_ready.connect
    def ready(**_: Any) -> None:
        began.update(thread_cpu())
        if profiler is not None:
            profiler.enable()

    @signals.task_postrun.connect
    def ran(task_id: str = "", **_: Any) -> None:
        ids.append(task_id)
        if len(ids) < n:
            return
        if profiler is not None:
            profiler.disable()
        spent = thread_cpu()
        names = {thread.native_id: thread.name for thread in threading.enumerate()}
        total = sum(spent[tid] - began.get(tid, 0.0) for tid in spent)
        lines = [f"worker CPU {total * 1000 / n:.3f} ms/task, by thread:"]
        for tid in sorted(spent, key=lambda tid: -(spent[tid] - began.get(tid, 0.0))):
            used = (spent[tid] - began.get(tid, 0.0)) * 1000 / n
            if used > 0:
                lines.append(f"  {names.get(tid, str(tid)):<28} {used:.3f} ms/task")
        Path(out_dir, "threads.txt").write_text("\n".join(lines) + "\n")
        if profiler is not None:
            profiler.dump_stats(str(Path(out_dir, "worker.prof")))
        backend: Any = bench_celery_app.app.backend
        client = backend.client
        for at in range(0, len(ids), 1000):
            client.delete(*(f"celery-task-meta-{task_id}" for task_id in ids[at : at + 1000]))
        os._exit(0)

    command = [
        "worker", "--pool=solo", "-Q", queue, "-l", "warning", "-n", f"{queue}@localhost",
        "--without-gossip", "--without-mingle", "--without-heartbeat",
    ]  # fmt: skip
    bench_celery_app.app.worker_main(command)


def top(profile: str, n: int, rows: int = 25) -> None:
    """The functions with the most own time, per task (µs), with their calls per task."""
    loaded: Any = pstats.Stats(profile)
    stats: dict[Any, Any] = loaded.stats
    ranked = sorted(stats.items(), key=lambda item: -item[1][2])[:rows]
    print(f"{'own us/task':>11} {'calls/task':>10}  function (main thread, under cProfile)")
    for (path, line, name), (_cc, calls, own, _cum, _callers) in ranked:
        where = path.split("site-packages/")[-1].split(f"{ROOT}/")[-1]
        print(f"{own * 1e6 / n:11.1f} {calls / n:10.2f}  {where}:{line}({name})")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--url", default="redis://127.0.0.1:6379/13")
    parser.add_argument("-n", type=int, default=3000)
    parser.add_argument("--kind", default="tracked")
    parser.add_argument("--backend", default="asyncbook+redis")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--role", choices=["publish", "work"], help=argparse.SUPPRESS)
    parser.add_argument("--queue", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "publish":
        publish(args.kind, args.n, args.queue)
        return
    if args.role == "work":
        work(args.n, args.queue, args.out, args.profile)
        return
    rest = args.url.split("://", 1)[1]
    namespace = f"bench-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "BENCH_REDIS_URL": args.url,
        "BENCH_BACKEND_URL": f"{args.backend}://{rest}",
        "BENCH_NAMESPACE": namespace,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE)]),
    }
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    me = [sys.executable, str(Path(__file__).resolve()), "-n", str(args.n), "--queue", queue]
    me += ["--kind", args.kind]
    subprocess.run([*me, "--role", "publish"], env=env, check=True, cwd=HERE)
    with tempfile.TemporaryDirectory() as tmp:
        work_args = [*me, "--role", "work", "--out", tmp, *(["--profile"] if args.profile else [])]
        quiet = subprocess.DEVNULL
        subprocess.run(work_args, env=env, check=True, cwd=HERE, stdout=quiet, stderr=quiet)
        print(f"{args.n} {args.kind} tasks, result backend {args.backend}://")
        print(Path(tmp, "threads.txt").read_text(), end="")
        if args.profile:
            top(str(Path(tmp, "worker.prof")), args.n)
    import redis

    client = redis.Redis.from_url(args.url)
    drop_keys(client, "{" + namespace + "}:*", f"*{queue}*")
    client.close()


if __name__ == "__main__":
    main()
