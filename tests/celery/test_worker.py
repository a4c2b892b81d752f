"""End to end: a real ``celery -A workers worker -B`` (prefork) on the real Redis.

The worker runs the example tasks with embedded beat (sweep and delivery every second)
and a webhook sink on a loopback server; every test reads the book and the webhook.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery

from asyncbook import AsyncTask, RedisBook
from asyncbook.celery import install, uninstall
from asyncbook.cli._demo import WebhookReceiver as Receiver

from ..support.books import delete_namespace
from ..support.celery import history, unique, wait_for, wait_terminal

ROOT = Path(__file__).resolve().parents[2]
URL = os.environ.get("ASYNCBOOK_CELERY_TEST_REDIS_URL", "redis://127.0.0.1:6379/12")

pytestmark = [pytest.mark.redis, pytest.mark.timeout(300)]


class Worker:
    """A ``celery -A workers worker -B`` subprocess in its own namespace and queue."""

    def __init__(self, tmp: Path, webhook: str) -> None:
        self.namespace = unique("e2e")
        self.queue = unique("e2e-q")
        self.name = f"{unique('w')}@localhost"
        self.log = tmp / "worker.log"
        env = {
            **os.environ,
            "REDIS_URL": URL,
            "ASYNCBOOK_NAMESPACE": self.namespace,
            "ASYNCBOOK_QUEUE": self.queue,
            "ASYNCBOOK_WEBHOOK_URL": webhook,
            "PYTHONPATH": str(ROOT),
        }
        command = [
            sys.executable, "-m", "celery", "-A", "workers", "worker", "-B",
            "-s", str(tmp / "beat-schedule"), "--pool=prefork", "-c", "2",
            "-n", self.name, "--without-gossip", "--without-mingle", "-l", "info",
        ]  # fmt: skip
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
            )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture(scope="module")
def client() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(URL)
    try:
        client.ping()
    except redis.ConnectionError as error:  # pragma: no cover - environment problem
        pytest.fail(f"Redis at {URL} does not answer ({error}); .ci/run starts one")
    yield client
    client.close()


@pytest.fixture(scope="module")
def webhook() -> Iterator[Receiver]:
    receiver = Receiver()
    yield receiver
    receiver.close()


@pytest.fixture(scope="module")
def worker(
    tmp_path_factory: pytest.TempPathFactory, webhook: Receiver, client: redis.Redis
) -> Iterator[Worker]:
    worker = Worker(tmp_path_factory.mktemp("worker"), webhook.url)
    try:
        wait_for(lambda: b"ready" in worker.log.read_bytes() or worker.process.poll(), 30)
        assert worker.process.poll() is None, worker.output()
        yield worker
    finally:
        worker.stop()
        delete_namespace(client, worker.namespace)
        for key in client.scan_iter(match=f"*{worker.queue}*"):
            client.delete(key)


@pytest.fixture(scope="module")
def app(worker: Worker) -> Iterator[Celery]:
    """The example app, publishing to the test worker's queue and namespace."""
    import workers

    app: Celery = workers.app
    app.conf.update(broker_url=URL, result_backend=URL, task_default_queue=worker.queue)
    install(app, RedisBook.from_url(URL, namespace=worker.namespace))
    yield app
    uninstall(app)


@pytest.fixture(scope="module")
def book(app: Celery, worker: Worker) -> RedisBook:
    return RedisBook.from_url(URL, namespace=worker.namespace)


def notified(webhook: Receiver, task_id: str) -> list[dict[str, Any]]:
    return [body for _headers, body in webhook.requests if body["taskId"] == task_id]


def settled(book: RedisBook, webhook: Receiver, task_id: str) -> AsyncTask:
    task = wait_terminal(book, task_id, timeout=30)
    wait_for(lambda: notified(webhook, task_id), timeout=15)
    return task


def test_examples_end_in_the_right_state(
    app: Celery, book: RedisBook, webhook: Receiver, worker: Worker
) -> None:
    import workers

    generate = workers.generate.delay("cat", steps=5, delay=0.05)
    flaky = workers.flaky_fetch.delay("page", failures=1)
    doomed = workers.reject_input.delay("???")
    late = workers.outlive.delay(seconds=4.0)

    task = settled(book, webhook, generate.id)
    assert (task.state, task.attempts, task.max_attempts) == ("succeeded", 1, 3)
    assert history(task) == ["start"] + ["progress"] * 5 + ["succeed"]
    assert task.result_ref == f"celery-task-meta-{generate.id}"

    task = settled(book, webhook, flaky.id)
    assert (task.state, task.attempts, task.max_attempts) == ("succeeded", 2, 4)
    assert history(task) == ["start", "fail", "start", "succeed"]
    assert task.error is not None
    assert task.error.startswith("TransientError")

    task = settled(book, webhook, doomed.id)
    assert (task.state, task.attempts) == ("failed", 1)
    assert history(task) == ["start", "fail"]

    # Outlives its 2 s ttl: beat's sweep expires it; its success at 4 s is refused.
    task = settled(book, webhook, late.id)
    assert task.state == "expired"
    assert late.get(timeout=15) == "too late"
    time.sleep(0.5)
    task = book.get(late.id)  # type: ignore[assignment]
    assert task.state == "expired"
    assert task.result_ref is None
    assert "succeed" not in history(task)

    time.sleep(2.5)  # beat delivers every second: nothing is delivered twice
    for result in (generate, flaky, doomed, late):
        (note,) = notified(webhook, result.id)
        assert note["state"] == book.get(result.id).state  # type: ignore[union-attr]
    keys = [h["Idempotency-Key"] for h, b in webhook.requests if b["taskId"] == generate.id]
    assert keys == [f"{generate.id}:succeeded"]


def active_pid(app: Celery, worker: Worker, task_id: str) -> int | None:
    active = app.control.inspect(destination=[worker.name], timeout=1.0).active() or {}
    for running in active.get(worker.name, []):
        if running["id"] == task_id:
            return int(running["worker_pid"])
    return None


def test_killed_pool_child_runs_again_and_succeeds_once(
    app: Celery, book: RedisBook, webhook: Receiver, worker: Worker
) -> None:
    import workers

    result = workers.generate.delay("kill", steps=10, delay=0.3)
    wait_for(lambda: (t := book.get(result.id)) is not None and t.progress >= 20, 20)
    pid = wait_for(lambda: active_pid(app, worker, result.id), 10)
    os.kill(pid, signal.SIGKILL)

    task = settled(book, webhook, result.id)
    assert (task.state, task.attempts) == ("succeeded", 1)
    types = history(task)
    assert types.count("start") == 1
    assert types.count("succeed") == 1
    assert "fail" not in types
    assert result.get(timeout=10) == {
        "prompt": "kill",
        "text": " ".join(f"kill-{i}" for i in range(1, 11)),
    }
    time.sleep(2.5)
    assert len(notified(webhook, result.id)) == 1
    assert "WorkerLostError" in worker.output() or "exited" in worker.output()


def test_redis_pause_loses_no_event(
    app: Celery, book: RedisBook, webhook: Receiver, worker: Worker, client: redis.Redis
) -> None:
    import workers

    result = workers.generate.delay("pause", steps=8, delay=0.25)
    wait_for(lambda: (t := book.get(result.id)) is not None and t.state == "running", 20)
    client.client_pause(2000, all=True)
    task = settled(book, webhook, result.id)
    assert (task.state, task.attempts) == ("succeeded", 1)
    assert history(task) == ["start"] + ["progress"] * 8 + ["succeed"]
    assert [e.event.progress for e in task.history[1:-1]] == [12, 25, 37, 50, 62, 75, 87, 100]  # type: ignore[union-attr]
