"""Lifecycle controls end to end: cancel, heartbeats and checkpoints with real prefork
``celery -A workers worker`` processes on the real Redis.

One worker (``-c 1``) serves the cancel scenarios; the heartbeat scenarios start workers
of their own (short heartbeat interval and timeout, and for the redelivery a short broker
visibility timeout), kill or stop them by PID, and run the sweep from the test. Every
worker shares this module's namespace (one book) but has a queue of its own.
"""

from __future__ import annotations

import os
import pickle
import signal
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from celery.result import AsyncResult

from asyncbook import AsyncBookError, AsyncTask, RedisBook, sweep
from asyncbook.celery import TaskCancelled, cancel, install, uninstall
from asyncbook.celery._lifecycle import CancelledRing

from ..support import ROOT
from ..support.books import delete_namespace
from ..support.celery import CELERY_URL as URL
from ..support.celery import (
    CeleryWorker,
    active_pid,
    close_result_backend,
    history,
    unique,
    wait_for,
    wait_terminal,
)
from ..support.processes import alive, kill_worker, signal_worker

HEARTBEAT_INTERVAL = 0.25
HEARTBEAT_TIMEOUT = 2.0
VISIBILITY_TIMEOUT = 3.0
SHORT_HEARTBEATS = {
    "ASYNCBOOK_HEARTBEAT_INTERVAL": str(HEARTBEAT_INTERVAL),
    "ASYNCBOOK_HEARTBEAT_TIMEOUT": str(HEARTBEAT_TIMEOUT),
}

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]


def start_worker(tmp: Path, namespace: str, queue: str | None = None, **env: str) -> CeleryWorker:
    """A ``-c 1`` worker on this module's namespace, with ``env`` added to its environment."""
    worker = CeleryWorker(ROOT, URL, tmp / f"{unique('worker')}.log", concurrency=1)
    worker.namespace = namespace
    if queue is not None:
        worker.queue = queue
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)  # CeleryWorker.start copies os.environ
    try:
        worker.start()
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return worker


# -- fixtures ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def namespace(client: redis.Redis) -> Iterator[str]:
    namespace = unique("lifecycle")
    yield namespace
    delete_namespace(client, namespace)


@pytest.fixture(scope="module")
def started(client: redis.Redis, namespace: str) -> Iterator[list[CeleryWorker]]:
    """Every worker this module starts; all stopped (or killed) and cleaned up at the end."""
    workers: list[CeleryWorker] = []
    yield workers
    for worker in workers:
        process = worker.process
        if process is not None and process.poll() is None:
            signal_worker(worker, signal.SIGCONT)  # a stopped worker cannot shut down
            worker.stop()
        kill_worker(worker)
    for worker in workers:
        for key in client.scan_iter(match=f"*{worker.queue}*"):
            client.delete(key)


@pytest.fixture(scope="module")
def worker(
    tmp_path_factory: pytest.TempPathFactory, namespace: str, started: list[CeleryWorker]
) -> CeleryWorker:
    """The worker of the cancel scenarios: one process, so a long task keeps it busy."""
    worker = start_worker(tmp_path_factory.mktemp("lifecycle"), namespace, **SHORT_HEARTBEATS)
    started.append(worker)
    return worker


@pytest.fixture(scope="module")
def app(worker: CeleryWorker, namespace: str) -> Iterator[Celery]:
    """The example app, publishing to the cancel worker's queue, on this module's book.

    The publisher creates each task in the book, heartbeat timeout included: it gets the
    workers' short one.
    """
    import workers

    app: Celery = workers.app
    app.conf.update(broker_url=URL, result_backend=URL, task_default_queue=worker.queue)
    app.conf.asyncbook_heartbeat_timeout = HEARTBEAT_TIMEOUT
    install(app, RedisBook.from_url(URL, namespace=namespace))
    yield app
    uninstall(app)
    close_result_backend(app)
    del app.conf["asyncbook_heartbeat_timeout"]


@pytest.fixture(scope="module")
def book(namespace: str) -> RedisBook:
    return RedisBook.from_url(URL, namespace=namespace)


@pytest.fixture(scope="module")
def logs(client: redis.Redis) -> Iterator[str]:
    """The prefix of the lists the example tasks' bodies write to (removed at the end)."""
    prefix = unique("lifecycle-log")
    yield prefix
    for key in client.scan_iter(match=f"{prefix}*"):
        client.delete(key)


# -- reading what happened ---------------------------------------------------------------


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def entries(client: redis.Redis, key: str) -> list[str]:
    """What the example task's body logged to ``key``."""
    return [text(raw) for raw in client.lrange(key, 0, -1)]


def chunks_run(client: redis.Redis, key: str) -> list[int]:
    return [int(entry[6:]) for entry in entries(client, key) if entry.startswith("chunk:")]


def notified(client: redis.Redis, book: RedisBook, task_id: str) -> list[str]:
    """The states the book's outbox holds notifications of, for ``task_id`` (read, not
    consumed: nothing delivers them in this module)."""
    rows: Any = client.xrange(book.keys.outbox)
    return [text(fields[b"state"]) for _, fields in rows if text(fields[b"taskId"]) == task_id]


def current(book: RedisBook, task_id: str) -> AsyncTask:
    task = book.get(task_id)
    assert task is not None
    return task


def in_state(book: RedisBook, task_id: str, state: str, timeout: float = 15.0) -> AsyncTask:
    def reached() -> AsyncTask | None:
        task = book.get(task_id)
        return task if task is not None and task.state == state else None

    task: AsyncTask = wait_for(reached, timeout)
    return task


def logged(worker: CeleryWorker, text: str, timeout: float = 15.0) -> None:
    wait_for(lambda: text in worker.output(), timeout, interval=0.05)


def revoked_by(app: Celery, worker: CeleryWorker) -> list[str]:
    revoked = app.control.inspect(destination=[worker.name], timeout=1.0).revoked() or {}
    found: list[str] = revoked.get(worker.name, [])
    return found


def keep_busy(app: Celery, book: RedisBook, seconds: float = 1.5) -> Any:
    """A task that occupies the worker's only process for about ``seconds``."""
    from workers.tasks import transcribe

    busy = transcribe.apply_async(kwargs={"chunks": 5, "delay": seconds / 5})
    in_state(book, busy.id, "running")
    return busy


# -- the pieces a pool process needs -----------------------------------------------------


def test_task_cancelled_survives_the_trip_to_the_main_process() -> None:
    # A prefork pool pickles the task's outcome (the exception of an ignored task
    # included) to the worker's main process, which cannot read a broken pickle.
    error = pickle.loads(pickle.dumps(TaskCancelled("t-1", "user left")))
    assert isinstance(error, TaskCancelled)
    assert (error.task_id, error.reason, str(error)) == (
        "t-1",
        "user left",
        "task t-1 was cancelled: user left",
    )


def test_the_ring_of_cancelled_tasks_is_shared_with_forked_processes() -> None:
    ring = CancelledRing(slots=4)
    assert "a" not in ring
    ring.add("a")
    ring.add("a")  # once
    assert "a" in ring
    assert "b" not in ring
    reader, writer = os.pipe()
    with warnings.catch_warnings():  # Python 3.12+ warns when a threaded process forks
        warnings.simplefilter("ignore", DeprecationWarning)
        child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        ring.add("from-child")
        os.write(writer, b"1" if "a" in ring else b"0")
        os._exit(0)
    os.close(writer)
    assert os.read(reader, 1) == b"1"
    os.close(reader)
    os.waitpid(child, 0)
    assert "from-child" in ring  # one memory for both processes
    for name in ("c", "d", "e", "f"):  # four slots: the oldest go
        ring.add(name)
    assert "a" not in ring
    assert "from-child" not in ring
    assert all(name in ring for name in ("c", "d", "e", "f"))


# -- cancel ------------------------------------------------------------------------------


@pytest.mark.parametrize(("way", "reason"), [("cancel", "user left"), ("revoke", "revoked")])
def test_a_queued_task_cancelled_or_revoked_reads_cancelled_at_once_and_never_runs(
    app: Celery,
    book: RedisBook,
    worker: CeleryWorker,
    client: redis.Redis,
    logs: str,
    way: str,
    reason: str,
) -> None:
    from workers.tasks import touch

    busy = keep_busy(app, book)
    log_key = unique(logs)
    queued = touch.apply_async((log_key,))
    assert current(book, queued.id).state == "queued"  # behind the busy task

    if way == "cancel":
        answer = cancel(app, queued.id, reason=reason)
        assert (answer.reason, answer.task.state) == ("cancelled", "cancelled")
    else:
        queued.revoke()  # Celery's own revoke
    task = current(book, queued.id)  # read back at once
    assert (task.state, task.error) == ("cancelled", reason)

    # The worker takes the message once the busy task is done, and discards it.
    logged(worker, f"Discarding revoked task: workers.tasks.touch[{queued.id}]")
    assert wait_terminal(book, busy.id).state == "succeeded"
    task = current(book, queued.id)
    assert (task.state, task.error, task.attempts) == ("cancelled", reason, 0)
    assert history(task) == ["cancel"]  # the worker's revoke found it cancelled already
    assert entries(client, log_key) == []  # the body never ran
    assert notified(client, book, queued.id) == ["cancelled"]
    assert str(AsyncResult(queued.id, app=app).state) == "REVOKED"


def test_revoke_of_a_task_no_worker_consumes_reads_cancelled_at_once(
    app: Celery, book: RedisBook, worker: CeleryWorker, client: redis.Redis, logs: str
) -> None:
    from workers.tasks import touch

    nobody = unique("nobody-consumes")
    try:
        queued = touch.apply_async((unique(logs),), queue=nobody)
        assert current(book, queued.id).state == "queued"

        app.control.revoke(queued.id)
        task = current(book, queued.id)  # read back at once: no worker had to see it
        assert (task.state, task.error, history(task)) == ("cancelled", "revoked", ["cancel"])
        assert notified(client, book, queued.id) == ["cancelled"]
        logged(worker, f"Tasks flagged as revoked: {queued.id}")  # Celery's revoke went out
    finally:
        client.delete(nobody)


def test_cancel_between_retries_stops_the_next_attempt(
    app: Celery, book: RedisBook, worker: CeleryWorker, client: redis.Redis, logs: str
) -> None:
    from workers.tasks import touch

    log_key = unique(logs)
    result = touch.apply_async((log_key,), {"retry_after": 2.0})
    waiting = wait_for(
        lambda: (t := book.get(result.id)) is not None and t.state == "queued" and t.attempts == 1
    )
    assert waiting
    assert entries(client, log_key) == ["0"]  # attempt 1 ran and asked for a retry

    answer = cancel(app, result.id)
    assert answer.reason == "cancelled"

    # The countdown ends: the worker holding the retry's message discards it.
    logged(worker, f"Discarding revoked task: workers.tasks.touch[{result.id}]")
    task = current(book, result.id)
    assert (task.state, task.attempts) == ("cancelled", 1)
    assert history(task) == ["start", "fail", "cancel"]
    assert entries(client, log_key) == ["0"]  # attempt 2's body never ran
    assert notified(client, book, result.id) == ["cancelled"]


def test_cancel_with_terminate_kills_the_running_process(
    app: Celery, book: RedisBook, worker: CeleryWorker, client: redis.Redis, logs: str
) -> None:
    from workers.tasks import transcribe

    log_key = unique(logs)
    result = transcribe.apply_async(kwargs={"chunks": 50, "delay": 0.2, "log_key": log_key})
    wait_for(lambda: len(chunks_run(client, log_key)) >= 2)
    pid = wait_for(lambda: active_pid(app, worker, result.id), 10)

    answer = cancel(app, result.id, reason="stop now", terminate=True)
    assert answer.reason == "cancelled"

    logged(worker, f"Terminating {result.id}")
    wait_for(lambda: not alive(pid), 10)  # the pool process that ran it is gone
    ran = chunks_run(client, log_key)
    time.sleep(0.6)  # longer than a chunk: nothing of it runs any more
    assert chunks_run(client, log_key) == ran
    assert len(ran) < 50
    task = current(book, result.id)
    assert (task.state, task.error) == ("cancelled", "stop now")
    assert history(task)[0] == "start"
    assert history(task)[-1] == "cancel"
    assert "succeed" not in history(task)
    assert notified(client, book, result.id) == ["cancelled"]
    assert str(AsyncResult(result.id, app=app).state) == "REVOKED"
    # The worker replaced the process and goes on working.
    assert wait_terminal(book, keep_busy(app, book, 0.2).id).state == "succeeded"


@pytest.mark.parametrize(("way", "reason"), [("cancel", "user left"), ("revoke", "revoked")])
def test_a_running_task_stops_at_its_next_progress_once_cancelled(
    app: Celery,
    book: RedisBook,
    worker: CeleryWorker,
    client: redis.Redis,
    logs: str,
    way: str,
    reason: str,
) -> None:
    from workers.tasks import transcribe

    log_key = unique(logs)
    result = transcribe.apply_async(kwargs={"chunks": 40, "delay": 0.3, "log_key": log_key})
    wait_for(lambda: current(book, result.id).progress >= 5)  # two chunks reported

    if way == "cancel":
        assert cancel(app, result.id, reason=reason).reason == "cancelled"
    else:
        result.revoke()  # without terminate: Celery alone would let it run to its end
    begun = chunks_run(client, log_key)  # the chunk under way now may finish, no other

    logged(worker, f"Task workers.tasks.transcribe[{result.id}] ignored")  # Celery: IGNORED
    time.sleep(0.6)  # two chunks' time: nothing more runs
    assert chunks_run(client, log_key) == begun
    task = current(book, result.id)
    assert (task.state, task.error) == ("cancelled", reason)
    assert task.progress < 100
    assert history(task)[-1] == "cancel"
    assert notified(client, book, result.id) == ["cancelled"]
    # Celery stores nothing for an ignored task (PENDING), or REVOKED when the revoke that
    # cancel() broadcasts reached the worker before the task ended: never a result or a
    # failure.
    assert AsyncResult(result.id, app=app).state in ("PENDING", "REVOKED")


def test_a_cancel_written_only_to_the_book_reaches_the_worker(
    app: Celery, book: RedisBook, worker: CeleryWorker, client: redis.Redis, logs: str
) -> None:
    from workers.tasks import touch

    busy = keep_busy(app, book, 2.5)
    log_key = unique(logs)
    queued = touch.apply_async((log_key,))
    answer = book.cancel(queued.id, "from the CLI")  # as `asyncbook cancel` does: no revoke
    assert answer.reason == "cancelled"

    # The worker's CancelWatch put it in Celery's revoked set while it still waited.
    wait_for(lambda: queued.id in revoked_by(app, worker), 10, interval=0.2)
    assert current(book, busy.id).state == "running"
    logged(worker, f"Discarding revoked task: workers.tasks.touch[{queued.id}]")
    task = current(book, queued.id)
    assert (task.state, task.error, task.attempts) == ("cancelled", "from the CLI", 0)
    assert history(task) == ["cancel"]
    assert entries(client, log_key) == []
    assert notified(client, book, queued.id) == ["cancelled"]
    assert wait_terminal(book, busy.id).state == "succeeded"


def test_a_task_raising_asyncbook_error_fails_with_it_everywhere(
    app: Celery, book: RedisBook, worker: CeleryWorker
) -> None:
    from workers.tasks import overreport

    result = overreport.apply_async()
    with pytest.raises(AsyncBookError) as caught:  # Celery's result backend, JSON
        result.get(timeout=15)
    assert type(caught.value) is AsyncBookError
    assert (caught.value.code, caught.value.field) == ("invalid-request", "progress")
    task = wait_terminal(book, result.id)
    assert task.state == "failed"
    assert task.error is not None
    assert task.error.startswith("AsyncBookError: async-task: progress must not exceed 100")
    assert "UnpickleableExceptionWrapper" not in worker.output()


# -- heartbeats --------------------------------------------------------------------------


@pytest.mark.long
def test_a_killed_worker_s_early_ack_task_fails_as_stalled(
    app: Celery,
    book: RedisBook,
    namespace: str,
    started: list[CeleryWorker],
    client: redis.Redis,
    tmp_path: Path,
) -> None:
    from workers.tasks import hold

    doomed = start_worker(tmp_path, namespace, **SHORT_HEARTBEATS)
    started.append(doomed)
    result = hold.apply_async(kwargs={"seconds": 60.0}, queue=doomed.queue)
    in_state(book, result.id, "running")

    # Silent (no progress) for longer than its heartbeat timeout: the heartbeats keep it.
    time.sleep(HEARTBEAT_TIMEOUT + 0.5)
    assert sweep(book).stalled == 0
    assert current(book, result.id).state == "running"

    kill_worker(doomed)  # main process and pool, SIGKILL: nothing says goodbye
    time.sleep(HEARTBEAT_TIMEOUT + HEARTBEAT_INTERVAL + 0.3)
    # This sweep, or the cancel worker's (its main process sweeps the namespace each second).
    sweep(book)
    task = wait_terminal(book, result.id, 5)
    assert (task.state, task.attempts) == ("failed", 1)
    assert task.error is not None
    assert task.error.startswith("stalled"), task.error
    assert history(task) == ["start", "fail"]
    assert notified(client, book, result.id) == ["failed"]


@pytest.mark.long
def test_a_stopped_acks_late_worker_s_task_resumes_from_its_checkpoint_elsewhere(
    app: Celery,
    book: RedisBook,
    namespace: str,
    started: list[CeleryWorker],
    client: redis.Redis,
    tmp_path: Path,
    logs: str,
) -> None:
    from workers.tasks import transcribe

    env = {**SHORT_HEARTBEATS, "ASYNCBOOK_VISIBILITY_TIMEOUT": str(VISIBILITY_TIMEOUT)}
    first = start_worker(tmp_path, namespace, **env)
    started.append(first)
    log_key = unique(logs)
    result = transcribe.apply_async(
        kwargs={"chunks": 12, "delay": 0.25, "log_key": log_key}, queue=first.queue
    )
    in_state(book, result.id, "running")
    delivered = time.monotonic()
    wait_for(lambda: int(book.last_cursor(result.id) or 0) >= 3)

    signal_worker(first, signal.SIGSTOP)  # frozen: no heartbeat, no ack, connections open
    time.sleep(HEARTBEAT_TIMEOUT + HEARTBEAT_INTERVAL + 0.3)
    sweep(book)  # or the cancel worker's own sweep got there first
    task = current(book, result.id)
    assert (task.state, task.attempts) == ("queued", 1)  # stalled, and may run again
    assert task.error is not None
    assert task.error.startswith("stalled"), task.error
    checkpoint = int(book.last_cursor(result.id) or 0)
    assert checkpoint >= 3
    assert history(task) == ["start"] + ["progress"] * checkpoint + ["fail"]
    assert notified(client, book, result.id) == []

    kill_worker(first)
    # A fresh worker on the same queue takes the unacknowledged message back once it is
    # older than the visibility timeout.
    time.sleep(max(0.0, delivered + VISIBILITY_TIMEOUT + 0.5 - time.monotonic()))
    second = start_worker(tmp_path, namespace, queue=first.queue, **env)
    started.append(second)

    task = wait_terminal(book, result.id, timeout=30)
    assert (task.state, task.attempts) == ("succeeded", 2)
    after = 12 - checkpoint
    assert history(task) == (
        ["start"] + ["progress"] * checkpoint + ["fail", "start"] + ["progress"] * after
        + ["succeed"]
    )  # fmt: skip
    log = entries(client, log_key)
    assert log.count("resume:0") == 1
    resumed = log.index(f"resume:{checkpoint}")
    assert log[resumed + 1] == f"chunk:{checkpoint}"  # its first chunk: right after the cursor
    assert result.get(timeout=10) == {"chunks": 12, "resumed_from": checkpoint}
    assert notified(client, book, result.id) == ["succeeded"]
