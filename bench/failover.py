"""A Cluster failover under a tracked Celery load, counted task by task (issue 20).

A loopback Redis Cluster of three masters with a replica each (``tests/support/cluster``,
a short ``cluster-node-timeout``) holds the book; Celery's broker and results stay on the
main Redis. A real prefork worker runs tracked tasks (``failover_app.py``) that a
publisher thread sends at a steady rate; the script's own book writes a burst of creates
meanwhile. Then the master that owns the namespace's slot is killed (SIGKILL) and its
replica promoted, while the load goes on; the killed node is started again once the
replica took over (it comes back as the new master's replica). Afterwards, each task the
client saw acknowledged must be in the book with that state or a later one:

- a publisher's create, acknowledged when the publisher's flush of its creates returned
  (the creates a ``CreateSender`` wrote, with the ``WAIT`` behind them read), and not
  logged as given up: the task is in the book;
- a burst create, acknowledged when ``create_many`` returned it: the task is in the book;
- an end, acknowledged when Celery's result said SUCCESS (the result is stored after the
  book's write of the end returned): the task is ``succeeded`` in the book, with its
  start and every progress event.

    .venv/bin/python bench/failover.py                       # wait 1, then wait 0
    .venv/bin/python bench/failover.py --wait 0 --replica-lag-ms 300
    .venv/bin/python bench/failover.py --cost --rounds 5     # wait 1 / wait 0 throughput

``--replica-lag-ms`` cuts the replica's link that long before the kill (``CLIENT KILL
TYPE replica`` on the master, the replica stopped meanwhile so that it cannot reconnect,
resumed after the kill): a replica that fell behind its master (a network blip, a slow
link), which is what an asynchronous replication loses. Results and what they mean:
docs/benchmarks.md, "Failover (issue 20)".
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import redis
from celery import Celery
from celery.result import AsyncResult

from asyncbook import AsyncBookError, CreateSpec, RedisBook
from asyncbook.celery import installed
from asyncbook.redis import retry_policy

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]

from _servers import drop_keys, stop_process  # noqa: E402
from failover_app import BROKER, make_app  # noqa: E402

from tests.support.cluster import LocalCluster, local_cluster  # noqa: E402

STEPS, DELAY = 3, 0.05
"""Each task: three chunks of 50 ms, a progress report after each."""


class Errors(logging.Handler):
    """The asyncbook errors this process logged (a create given up on names its task)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@dataclass
class Run:
    wait: int
    node_timeout_ms: int
    lag_ms: int
    promoted_s: float = float("nan")
    read_s: float = float("nan")
    write_s: float = float("nan")
    published: int = 0
    creates_acked: int = 0
    creates_lost: int = 0
    burst_acked: int = 0
    burst_lost: int = 0
    burst_refused: int = 0
    succeeded: int = 0
    succeeded_before_kill: int = 0
    ends_lost: int = 0
    events_missing: int = 0
    unfinished: int = 0
    publisher_errors: int = 0
    worker_errors: int = 0
    lost_ids: list[str] = field(default_factory=list)
    lost_ends_in: dict[str, int] = field(default_factory=dict)
    """The book's state of each task whose end was lost ('missing': not in the book)."""


def env_for(
    url: str, namespace: str, queue: str, wait: int, ready: Path, shards: int = 1
) -> dict[str, str]:
    path = os.pathsep.join([str(HERE), str(ROOT), os.environ.get("PYTHONPATH", "")])
    return {
        **os.environ,
        "FAILOVER_BROKER_URL": BROKER,
        "FAILOVER_BOOK_URL": url,
        "FAILOVER_NAMESPACE": namespace,
        "FAILOVER_QUEUE": queue,
        "FAILOVER_WAIT_REPLICAS": str(wait),
        "FAILOVER_SHARDS": str(shards),
        "FAILOVER_READY_FILE": str(ready),
        "PYTHONPATH": path,
    }


@contextmanager
def worker(
    url: str,
    namespace: str,
    queue: str,
    wait: int,
    folder: Path,
    shards: int = 1,
    concurrency: int = 4,
) -> Iterator[Path]:
    """A prefork worker (``-c concurrency``) on ``queue``, its book of ``shards``; yields
    its log file; stopped by PID."""
    ready, log = folder / f"ready-{queue}", folder / f"worker-{queue}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "failover_app", "worker", "-P", "prefork",
             "-c", str(concurrency), "-Q", queue, "--without-heartbeat", "--without-gossip",
             "--without-mingle", "-l", "warning"],
            cwd=HERE, env=env_for(url, namespace, queue, wait, ready, shards),
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the worker did not start; see {log}")
            time.sleep(0.1)
        yield log
    finally:
        stop_process(process, 30)


class Publisher:
    """A process of its own (its book's read-your-writes would hold up this one's reads)
    that publishes ``rate`` tasks a second; every ``flush_every`` publishes it flushes its
    creates, and counts them acknowledged once the flush returned (``publish``)."""

    def __init__(self, url: str, namespace: str, queue: str, wait: int, rate: float) -> None:
        self.stop_file = Path(tempfile.mkdtemp(prefix="asyncbook-failover-pub-")) / "stop"
        env = env_for(url, namespace, queue, wait, self.stop_file)
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--publish", url, namespace, queue, str(wait), str(rate),
             str(self.stop_file)],
            env=env, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.ids: list[str] = []
        self.acked: set[str] = set()
        self.errors: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            kind, _, rest = line.rstrip("\n").partition(" ")
            if kind == "sent":
                self.ids.append(rest)
            elif kind == "acked":
                self.acked.update(rest.split())
            elif kind == "error":
                self.errors.append(rest)

    def stop(self) -> None:
        """Stop publishing; returns once the last creates were flushed."""
        self.stop_file.touch()
        self.process.wait(120)
        self._reader.join()


def publish(url: str, namespace: str, queue: str, wait: int, rate: float, stop: Path) -> None:
    """The publisher process: prints ``sent <id>``, ``acked <ids>`` and ``error <text>``."""
    errors = Errors()
    logging.getLogger("asyncbook").addHandler(errors)
    app = make_app(url, namespace, queue, wait)
    integration = installed(app)
    assert integration is not None
    task = app.tasks["failover.work"]
    pending: list[str] = []
    reported = 0

    def flush() -> None:
        nonlocal pending, reported
        integration.flush_creates()
        print("acked", " ".join(pending), flush=True)
        pending = []
        for message in errors.messages[reported:]:
            print("error", message.replace("\n", " "), flush=True)
        reported = len(errors.messages)

    while not stop.exists():
        began = time.monotonic()
        pending.append(task.apply_async((STEPS, DELAY)).id)
        print("sent", pending[-1], flush=True)
        if len(pending) >= 10:
            flush()
        time.sleep(max(0.0, 1 / rate - (time.monotonic() - began)))
    flush()


class Burst(threading.Thread):
    """The script's own book: ``create_many`` of 50 tasks at a time, as fast as it can,
    until stopped; the ids of each batch it returned are acknowledged."""

    def __init__(self, book: RedisBook) -> None:
        super().__init__(daemon=True)
        self.book = book
        self.stop = threading.Event()
        self.acked: list[str] = []
        self.refused = 0
        self.sent = 0

    def run(self) -> None:
        while not self.stop.is_set():
            ids = [f"burst-{self.sent + n}" for n in range(50)]
            self.sent += len(ids)
            try:
                results = self.book.create_many(
                    [CreateSpec(i, 0, 600_000, 1, exist_ok=True) for i in ids]
                )
            except AsyncBookError:  # an outage, or too few replicas: not acknowledged
                self.refused += len(ids)
                continue
            self.acked += [
                i for i, r in zip(ids, results, strict=True) if not isinstance(r, AsyncBookError)
            ]


def first_ok(call: Any) -> bool:
    try:
        call()
    except (AsyncBookError, redis.RedisError, OSError, RuntimeError):
        return False
    return True


def fail_over(
    cluster: LocalCluster, book: RedisBook, run: Run, probe_id: str, burst: Burst
) -> float:
    """Kill the master of the book's slot (the replica stopped ``lag_ms`` before), time its
    replica's promotion, the book's first read and first acknowledged write; start the
    killed node again once the replica took over. Returns the kill's wall-clock time."""
    shard_of = getattr(book, "shard_of", None)  # sharded: the probe's shard's master
    tag = (shard_of(probe_id) if shard_of else book).keys.tag
    owner = cluster.owner(tag)
    replica = cluster.processes[cluster.replica_of[owner][0]]
    if run.lag_ms:
        # The replica's link cut (and the replica stopped, so that it cannot reconnect):
        # what the master writes from here on reaches no replica.
        replica.send_signal(signal.SIGSTOP)
        master = redis.Redis(port=owner)
        master.client_kill_filter(_type="replica")
        master.close()
        time.sleep(run.lag_ms / 1000)
    cluster.processes[owner].send_signal(signal.SIGKILL)
    wall = time.time()
    burst.stop.set()
    cluster.processes[owner].wait()  # dead: from here on nothing of it answers
    killed_at = time.monotonic()
    if run.lag_ms:
        replica.send_signal(signal.SIGCONT)
    while time.monotonic() - killed_at < 60:
        if run.promoted_s != run.promoted_s and first_ok(
            lambda: _raise_unless(cluster.owner(tag) != owner)
        ):
            run.promoted_s = time.monotonic() - killed_at
            cluster.restart(owner)
        if run.read_s != run.read_s and first_ok(lambda: book.get(probe_id)):
            run.read_s = time.monotonic() - killed_at
        if run.write_s != run.write_s and first_ok(
            lambda: book.create(
                id=probe_id, now_ms=0, ttl_ms=600_000, max_attempts=1, exist_ok=True
            )
        ):
            run.write_s = time.monotonic() - killed_at
        if not math.isnan(run.promoted_s + run.read_s + run.write_s):
            break
        time.sleep(0.01)
    return wall


def _raise_unless(condition: bool) -> None:
    if not condition:
        raise RuntimeError("not yet")


def failover_run(args: argparse.Namespace, wait: int) -> Run:
    run = Run(wait=wait, node_timeout_ms=args.node_timeout_ms, lag_ms=args.replica_lag_ms)
    folder = Path(tempfile.mkdtemp(prefix="asyncbook-failover-"))
    namespace, queue = f"fo-{uuid.uuid4().hex[:8]}", f"fo-{uuid.uuid4().hex[:8]}"
    with local_cluster(
        folder / "cluster", replicas=1, node_timeout_ms=args.node_timeout_ms
    ) as cluster:
        url = f"redis+cluster://127.0.0.1:{cluster[0]}"
        book = RedisBook.from_url(
            url, namespace=namespace, wait_replicas=wait, wait_timeout_ms=500, shards=args.shards,
            retry=retry_policy(0), socket_timeout=1, socket_connect_timeout=1,
        )  # fmt: skip
        app = make_app(url, namespace, queue, wait)
        with worker(url, namespace, queue, wait, folder) as log:
            publisher = Publisher(url, namespace, queue, wait, args.rate)
            time.sleep(args.before)
            burst = Burst(book)
            if args.burst:
                burst.start()
                time.sleep(args.burst)
            killed_wall = fail_over(cluster, book, run, f"probe-{namespace}", burst)
            time.sleep(args.after)
            publisher.stop()
            if args.burst:
                burst.join()
            results = [AsyncResult(task_id, app=app) for task_id in publisher.ids]
            for result in results:
                result.get(timeout=120, propagate=False)
            time.sleep(1.0)  # the last ends' writes, behind Celery's results
        count(run, book, publisher, burst, results, killed_wall)
        failed = [line for line in log.read_text().splitlines() if "ERROR" in line]
        run.worker_errors = len(failed)
        for line in publisher.errors[:3] + failed[:3]:
            print("  logged:", line[:300], file=sys.stderr)
        cleanup(app, queue, publisher.ids)
        book.client.close()
    return run


def count(
    run: Run,
    book: RedisBook,
    publisher: Publisher,
    burst: Burst,
    results: list[AsyncResult[Any]],
    killed_wall: float,
) -> None:
    given_up = {i for i in publisher.ids if any(i in message for message in publisher.errors)}
    run.publisher_errors = len(publisher.errors)
    run.published = len(publisher.ids)
    acked = publisher.acked - given_up
    run.creates_acked = len(acked)
    run.burst_acked = len(burst.acked)
    run.burst_refused = burst.refused
    for task_id in sorted(acked):
        if book.get(task_id) is None:
            run.creates_lost += 1
            run.lost_ids.append(task_id)
    for task_id in burst.acked:
        if book.get(task_id) is None:
            run.burst_lost += 1
            run.lost_ids.append(task_id)
    for result in results:
        if result.state != "SUCCESS":
            run.unfinished += 1
            continue
        run.succeeded += 1
        done = result.date_done
        if (
            isinstance(done, datetime)
            and done.replace(tzinfo=done.tzinfo or UTC).timestamp() < killed_wall
        ):
            run.succeeded_before_kill += 1
        task = book.get(result.id)
        if task is None or task.state.value != "succeeded":
            run.ends_lost += 1
            state = "missing" if task is None else task.state.value
            run.lost_ends_in[state] = run.lost_ends_in.get(state, 0) + 1
            continue
        kinds = [entry.event.type for entry in task.history]
        run.events_missing += (kinds.count("start") < 1) + max(0, STEPS - kinds.count("progress"))


def cleanup(app: Celery, queue: str, ids: list[str]) -> None:
    client = redis.Redis.from_url(BROKER)
    for start in range(0, len(ids), 500):
        client.delete(*(f"celery-task-meta-{i}" for i in ids[start : start + 500]))
    drop_keys(client, f"*{queue}*")
    client.close()
    app.close()


def cost(args: argparse.Namespace) -> None:
    """Tracked executions per second with wait 1 and wait 0, interleaved round by round,
    on one cluster with replicas (no kill): the median of the per-round ratios."""
    folder = Path(tempfile.mkdtemp(prefix="asyncbook-failover-cost-"))
    with local_cluster(
        folder / "cluster", replicas=1, node_timeout_ms=args.node_timeout_ms
    ) as cluster:
        url = f"redis+cluster://127.0.0.1:{cluster[0]}"
        setups = {}
        for wait in (0, 1):
            namespace, queue = f"fo-{uuid.uuid4().hex[:8]}", f"fo-{uuid.uuid4().hex[:8]}"
            setups[wait] = (namespace, queue, make_app(url, namespace, queue, wait))
        with (
            worker(url, setups[0][0], setups[0][1], 0, folder),
            worker(url, setups[1][0], setups[1][1], 1, folder),
        ):
            rates: dict[int, list[float]] = {0: [], 1: []}
            ids: dict[int, list[str]] = {0: [], 1: []}
            for round_ in range(args.rounds + 1):  # round 0 warms up, not counted
                for wait in (0, 1) if round_ % 2 else (1, 0):
                    app = setups[wait][2]
                    task = app.tasks["failover.work"]
                    began = time.monotonic()
                    sent = [task.apply_async((1, 0.0)).id for _ in range(args.tasks)]
                    integration = installed(app)
                    assert integration is not None
                    integration.flush_creates()  # the creates acknowledged too
                    for task_id in sent:
                        AsyncResult(task_id, app=app).get(timeout=120, propagate=False)
                    if round_:
                        rates[wait].append(args.tasks / (time.monotonic() - began))
                    ids[wait] += sent
        ratios = [one / zero for one, zero in zip(rates[1], rates[0], strict=True)]
        print(f"{args.rounds} rounds of {args.tasks} tasks each (1 progress report), interleaved")
        print("| setting | tracked executions/s (median) |")
        print("|---|---|")
        for wait in (0, 1):
            print(f"| `asyncbook_wait_replicas={wait}` | {statistics.median(rates[wait]):.0f} |")
        print(f"| ratio (1 / 0) | **{statistics.median(ratios):.2f}** |")
        print("per round:", ", ".join(f"{r:.2f}" for r in ratios))
        for wait in (0, 1):
            cleanup(setups[wait][2], setups[wait][1], ids[wait])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--wait",
        type=int,
        choices=(0, 1),
        action="append",
        help="asyncbook_wait_replicas (repeat for several runs; default 1, 0)",
    )
    parser.add_argument("--node-timeout-ms", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=40.0, help="tasks published a second")
    parser.add_argument("--before", type=float, default=4.0, help="seconds of load before")
    parser.add_argument("--after", type=float, default=5.0, help="seconds of load after")
    parser.add_argument(
        "--burst",
        type=float,
        default=0.5,
        help="seconds of create_many burst right before the kill (0: none)",
    )
    parser.add_argument("--replica-lag-ms", type=int, default=0)
    parser.add_argument("--cost", action="store_true", help="measure throughput instead")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument(
        "--shards",
        type=int,
        default=1,
        help="asyncbook_shards: the namespace over this many hash tags",
    )
    parser.add_argument("--publish", nargs=6, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)  # fmt: skip
    os.environ["FAILOVER_SHARDS"] = str(args.shards)  # the worker's and publisher's too
    if args.publish:
        url, namespace, queue, wait, rate, stop = args.publish
        publish(url, namespace, queue, int(wait), float(rate), Path(stop))
        return
    if args.cost:
        cost(args)
        return
    print(f"asyncbook_shards = {args.shards}")
    print(
        "| wait | node timeout | replica lag | promoted after | book reads after "
        "| book writes after | creates acked / lost | burst acked / lost (refused) "
        "| SUCCESS (before kill) / ends lost | events missing | errors: publisher, worker |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")  # fmt: skip
    for wait in args.wait or [1, 0]:
        r = failover_run(args, wait)
        print(f"| {r.wait} | {r.node_timeout_ms} ms | {r.lag_ms} ms | {r.promoted_s:.2f} s "
              f"| {r.read_s:.2f} s | {r.write_s:.2f} s | {r.creates_acked} / {r.creates_lost} "
              f"| {r.burst_acked} / {r.burst_lost} ({r.burst_refused}) "
              f"| {r.succeeded} ({r.succeeded_before_kill}) / {r.ends_lost} "
              f"| {r.events_missing} | {r.publisher_errors}, {r.worker_errors} |",
              flush=True)  # fmt: skip
        if r.lost_ids:
            print(f"lost (first 5): {r.lost_ids[:5]}", flush=True)
        if r.lost_ends_in:
            print(f"the book's state of the tasks whose end was lost: {r.lost_ends_in}")
        if r.unfinished:
            print(f"{r.unfinished} of {r.published} published tasks not SUCCESS", flush=True)


if __name__ == "__main__":
    main()
