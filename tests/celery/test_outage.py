"""The book's Redis down while a tracked task is published and run (issue 30, item 4).

Two real Redis servers: one holds Celery's broker and asyncbook's result backend, the
other the book (``asyncbook_redis_url``). The book's server is stopped by PID before the
publish and started again after the worker ran the task; the task must then reach the
book whole, its events in order, and the publisher must exit within its bound.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from asyncbook import RedisBook

from ..support import ROOT
from ..support.celery import CeleryWorker, history, wait_for, wait_terminal
from ..support.servers import free_port, redis_server, wait_until

pytestmark = [pytest.mark.redis, pytest.mark.timeout(180)]

PUBLISH = """
import time
from tests.support.outage_app import add
print(add.delay(2, 3).id, time.time(), flush=True)
"""
"""A short publisher script: one tracked task, then exit (it prints the task's id and
when it was published)."""
WORKER_RETRY_FOR = 4
"""The worker's ``asyncbook_retry_for`` (s): how long a task's end waits for the book."""


def _stopped(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the server by its PID and wait for it to exit."""
    os.kill(process.pid, signal.SIGTERM)
    process.wait(10)


@pytest.mark.parametrize("deferred", [True, False], ids=["deferred-create", "create-at-publish"])
def test_a_task_published_and_run_while_the_book_is_down_reaches_it_once_back(
    tmp_path: Path, deferred: bool
) -> None:
    """``deferred``: the publisher queues its create (``asyncbook_defer_creates``, the
    default), else it tries the create before sending the message (for 1 s here)."""
    broker_port, book_port = free_port(), free_port()
    broker_url = f"redis://127.0.0.1:{broker_port}/0"
    book_url = f"redis://127.0.0.1:{book_port}/0"
    with redis_server(tmp_path / "broker", "--port", str(broker_port)):
        broker = redis.Redis(port=broker_port)
        wait_until(broker.ping, what="broker")
        with redis_server(tmp_path / "book", "--port", str(book_port)) as book_server:
            wait_until(redis.Redis(port=book_port).ping, what="book")
            _stopped(book_server)  # the book is down from here on

        worker = CeleryWorker(
            ROOT, broker_url, tmp_path / "worker.log", app="tests.support.outage_app"
        )
        defer = "1" if deferred else "0"
        worker.env = {
            "OUTAGE_BOOK_URL": book_url,
            "OUTAGE_RETRY_FOR": str(WORKER_RETRY_FOR),
            "OUTAGE_DEFER_CREATES": defer,
        }
        with worker.running(broker):
            env = {
                **os.environ,
                "REDIS_URL": broker_url,
                "OUTAGE_BOOK_URL": book_url,
                "ASYNCBOOK_NAMESPACE": worker.namespace,
                "ASYNCBOOK_QUEUE": worker.queue,
                "PYTHONPATH": str(ROOT),
                "OUTAGE_DEFER_CREATES": defer,
                "OUTAGE_RETRY_FOR": "10" if deferred else "1",
            }
            published = subprocess.run(
                [sys.executable, "-c", PUBLISH],
                cwd=ROOT,
                env=env,
                capture_output=True,
                timeout=60,
                check=True,
            )
            exited = time.time()
            task_id, published_at = published.stdout.decode().split()
            took = exited - float(published_at)  # from the publish to the exit
            stderr = published.stderr.decode(errors="replace").splitlines()
            # Celery's result is stored: the worker ran the task and let its end wait.
            meta = f"celery-task-meta-{task_id}"
            wait_for(lambda: broker.exists(meta), timeout=30)

            with redis_server(tmp_path / "book-again", "--port", str(book_port)):
                book = RedisBook.from_url(book_url, namespace=worker.namespace)
                wait_until(book.client.ping, what="book")
                with contextlib.suppress(AssertionError):  # the asserts below say what it holds
                    wait_terminal(book, task_id, timeout=30)
                task = book.get(task_id)
                info = book.info(task_id)
                book.client.close()
            log = worker.output()

    assert task is not None, (took, stderr, log)
    assert history(task) == ["start", "progress", "progress", "succeed"], log
    assert task.state.value == "succeeded"
    assert task.max_attempts == 3  # max_retries=2, from the message
    assert task.attempts == 1
    assert [entry.version for entry in task.history] == [1, 2, 3, 4]  # created at version 0
    # Created from the message: its name, its args, created when it was published.
    assert info is not None
    assert info.name == "outage.add", info
    assert info.args_repr == "(2, 3)", info
    assert info.created_at_ms is not None
    assert info.created_at_ms <= task.history[0].event.at_ms
    assert task.expires_at_ms == info.created_at_ms + 600_000  # its ttl of 10 minutes
    # The worker ran the task at once (0.04 s here): it used to retry a create at the
    # start for most of its retry_for when the message said none was made (1.7 s).
    started_after = task.history[0].event.at_ms / 1000 - float(published_at)
    assert started_after < 1.0, started_after
    assert "refused an event" not in log, log
    # The publisher exits within its bound (asyncbook_exit_wait, 2 s), in two lines: the
    # outage's warning and what it left to the worker.
    assert took < 4.0, (took, stderr)
    assert len(stderr) <= 2, stderr
