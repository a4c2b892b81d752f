"""Edges only a real prefork worker shows: a hard time limit, which queues a worker
consumes, the sweep and delivery that no queue setting starves.

``celery -A workers worker -Q <its task queue>`` (no beat, not the asyncbook queue; with
and without its own sweep), and ``celery -A workers worker -B`` (no ``-Q``), on the real
Redis, each in a namespace that already holds a task long past its deadline. The example
app writes no ``beat_schedule`` (``install`` does).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
from celery import Celery

from asyncbook import RedisBook
from asyncbook.celery._tracking import now_ms
from asyncbook.cli._demo import WebhookReceiver

from ..support import ROOT
from ..support.celery import CELERY_URL as URL
from ..support.celery import CeleryWorker, example_app, history, wait_for, wait_terminal

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]


@contextmanager
def running(worker: CeleryWorker, client: redis.Redis, webhook: str = "") -> Iterator[CeleryWorker]:
    """``worker`` started in a namespace holding a task long past its deadline."""
    book = RedisBook.from_url(URL, namespace=worker.namespace)
    book.create(id="overdue", now_ms=now_ms() - 120_000, ttl_ms=1_000, max_attempts=1)
    with worker.running(client, webhook):
        yield worker


@pytest.fixture(scope="module")
def worker(
    tmp_path_factory: pytest.TempPathFactory, client: redis.Redis, webhook: WebhookReceiver
) -> Iterator[CeleryWorker]:
    tmp = tmp_path_factory.mktemp("corner-worker")
    worker = CeleryWorker(ROOT, URL, tmp / "worker.log", concurrency=1)
    worker.extra = ["-Q", worker.queue]  # its tasks only, no beat, not the asyncbook queue
    with running(worker, client, webhook.url):
        yield worker


@pytest.fixture
def no_sweep_worker(tmp_path: Path, client: redis.Redis) -> Iterator[CeleryWorker]:
    worker = CeleryWorker(ROOT, URL, tmp_path / "worker.log", concurrency=1)
    worker.extra = ["-Q", worker.queue]
    worker.env = {"ASYNCBOOK_WORKER_SWEEP": "0"}  # asyncbook_worker_sweep = False
    with running(worker, client):
        yield worker


@pytest.fixture
def beat_worker(tmp_path: Path, client: redis.Redis) -> Iterator[CeleryWorker]:
    worker = CeleryWorker(ROOT, URL, tmp_path / "worker.log", concurrency=1)
    worker.extra = ["-B", "-s", str(tmp_path / "beat-schedule")]
    with running(worker, client):
        yield worker


@pytest.fixture(scope="module")
def app(worker: CeleryWorker) -> Iterator[Celery]:
    """The example app, publishing to the worker's queue and namespace."""
    with example_app(worker.queue, worker.namespace) as app:
        yield app


def test_a_worker_on_its_own_queue_alone_sweeps_and_delivers_without_beat(
    app: Celery, worker: CeleryWorker, webhook: WebhookReceiver
) -> None:
    import workers

    book = RedisBook.from_url(URL, namespace=worker.namespace)
    assert wait_terminal(book, "overdue", timeout=5).state == "expired"
    # Tracked, 2 s ttl, on a queue nobody consumes: only the sweep can end it.
    result = workers.outlive.apply_async(queue=f"{worker.queue}-nobody")
    task = wait_terminal(book, result.id, timeout=6)
    assert task.state == "expired"
    outbox = book.client.xrange(book.keys.outbox)
    late_ms = [int(entry.split(b"-")[0]) - task.expires_at_ms for entry, _ in outbox[-1:]]
    assert 0 <= late_ms[0] <= 1_500, late_ms  # the notification, in the outbox at once
    assert book.last_sweep_ms() is not None
    assert "does not consume" not in worker.output()
    # Delivered to the sink by the worker's main process (asyncbook.deliver never ran).
    wait_for(lambda: any(body["taskId"] == result.id for _, body in webhook.requests), 5)
    assert "asyncbook.deliver[" not in worker.output()  # no such task message was run


def test_a_worker_without_its_own_sweep_and_the_queue_says_so(
    no_sweep_worker: CeleryWorker,
) -> None:
    output = no_sweep_worker.output()
    assert f"does not consume queue '{no_sweep_worker.queue}-asyncbook'" in output, output
    assert "past its deadline" in output
    book = RedisBook.from_url(URL, namespace=no_sweep_worker.namespace)
    time.sleep(1.5)
    assert book.get("overdue").state == "queued"  # type: ignore[union-attr]


def test_a_worker_without_q_runs_the_sweep_from_the_asyncbook_queue(
    beat_worker: CeleryWorker,
) -> None:
    book = RedisBook.from_url(URL, namespace=beat_worker.namespace)
    task = wait_terminal(book, "overdue", timeout=20)  # beat -> its queue -> this worker
    assert task.state == "expired"
    output = beat_worker.output()
    assert f"{beat_worker.queue}-asyncbook" in output.split("[tasks]")[0]  # [queues]
    assert "asyncbook.sweep" in output
    assert "does not consume" not in output


def test_a_hard_time_limit_fails_the_task_once_without_a_refusal(
    app: Celery, worker: CeleryWorker
) -> None:
    import workers

    # Celery sends task_failure twice for a hard time limit: with the request, and
    # again from the timeout handler without it. The second is the same failure.
    result = workers.generate.apply_async(("slow",), {"steps": 20, "delay": 0.2}, time_limit=1)
    task = wait_terminal(RedisBook.from_url(URL, namespace=worker.namespace), result.id, 30)
    assert (task.state, task.attempts) == ("failed", 1)
    assert task.error is not None
    assert task.error.startswith("TimeLimitExceeded")
    assert history(task)[0] == "start"
    assert history(task)[-1] == "fail"
    time.sleep(1.0)  # the second signal comes right after the first
    output = worker.output()
    assert "Hard time limit (1s) exceeded" in output, output
    assert "refused" not in output, output
