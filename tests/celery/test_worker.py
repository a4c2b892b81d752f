"""End to end: a real ``celery -A workers worker -B`` (prefork) on the real Redis.

The worker runs the example tasks with embedded beat (sweep and delivery every second)
and a webhook sink on a loopback server, signed with two secrets (as while rotating);
every test reads the book and the webhook.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery
from standardwebhooks import Webhook

from asyncbook import AsyncTask, RedisBook
from asyncbook.celery import TaskExpired
from asyncbook.cli._demo import WebhookReceiver as Receiver

from ..support import ROOT
from ..support.celery import CELERY_URL as URL
from ..support.celery import CeleryWorker, active_pid, example_app, history, wait_for, wait_terminal

pytestmark = [pytest.mark.redis, pytest.mark.timeout(300)]

SECRETS = ("whsec_" + "Y3VycmVudA" * 4, "whsec_" + "cHJldmlvdXM" * 4)
"""The current and the previous secret (ASYNCBOOK_WEBHOOK_SECRET, space separated)."""


@pytest.fixture(scope="module")
def worker(
    tmp_path_factory: pytest.TempPathFactory, webhook: Receiver, client: redis.Redis
) -> Iterator[CeleryWorker]:
    """``celery -A workers worker -B`` (two prefork processes, embedded beat)."""
    tmp = tmp_path_factory.mktemp("worker")
    beat = ["-B", "-s", str(tmp / "beat-schedule")]
    worker = CeleryWorker(ROOT, URL, tmp / "worker.log", extra=beat)
    worker.env["ASYNCBOOK_WEBHOOK_SECRET"] = " ".join(SECRETS)
    # A killed attempt is over once its heartbeat is overdue (one run per task).
    worker.env["ASYNCBOOK_HEARTBEAT_INTERVAL"] = "1"
    worker.env["ASYNCBOOK_HEARTBEAT_TIMEOUT"] = "5"
    with worker.running(client, webhook.url):
        yield worker


@pytest.fixture(scope="module")
def app(worker: CeleryWorker) -> Iterator[Celery]:
    """The example app, publishing to the test worker's queue and namespace."""
    with example_app(worker.queue, worker.namespace, asyncbook_heartbeat_timeout=5) as app:
        yield app


@pytest.fixture(scope="module")
def book(app: Celery, worker: CeleryWorker) -> RedisBook:
    return RedisBook.from_url(URL, namespace=worker.namespace)


def notified(webhook: Receiver, task_id: str) -> list[dict[str, Any]]:
    return [body for _headers, body in webhook.requests if body["taskId"] == task_id]


def settled(book: RedisBook, webhook: Receiver, task_id: str) -> AsyncTask:
    task = wait_terminal(book, task_id, timeout=30)
    wait_for(lambda: notified(webhook, task_id), timeout=15)
    return task


def test_examples_end_in_the_right_state(
    app: Celery, book: RedisBook, webhook: Receiver, worker: CeleryWorker
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

    # Outlives its 2 s ttl: beat's sweep expires it; its success at 4 s is refused, and
    # asyncbook's result backend (celeryconfig.py) stores what the book says.
    task = settled(book, webhook, late.id)
    assert task.state == "expired"
    with pytest.raises(TaskExpired):
        late.get(timeout=15)
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
    # every POST is signed with both secrets: a receiver holding either verifies it
    for (headers, note), body in zip(webhook.requests, webhook.bodies, strict=True):
        for secret in SECRETS:
            assert Webhook(secret).verify(body, headers) == note


@pytest.mark.long
def test_killed_pool_child_runs_again_and_succeeds_once(
    app: Celery, book: RedisBook, webhook: Receiver, worker: CeleryWorker
) -> None:
    import workers

    result = workers.generate.delay("kill", steps=10, delay=0.3)
    wait_for(lambda: (t := book.get(result.id)) is not None and t.progress >= 20, 20)
    pid = wait_for(lambda: active_pid(app, worker, result.id), 10)
    os.kill(pid, signal.SIGKILL)

    # Its message comes back at once (reject_on_worker_lost) while the killed attempt's
    # heartbeat is fresh: held, and postponed to after its stall time, it then ends the
    # dead attempt as stalled and runs as the next attempt (one run per task).
    task = wait_terminal(book, result.id, timeout=45)
    wait_for(lambda: notified(webhook, result.id), timeout=15)
    assert (task.state, task.attempts) == ("succeeded", 2)
    types = history(task)
    assert (types.count("start"), types.count("fail"), types.count("succeed")) == (2, 1, 1)
    stalled = next(entry.event for entry in task.history if entry.event.type == "fail")
    assert stalled.error.startswith("stalled")
    assert [(e.action, e.outcome) for e in book.audit(result.id)] == [("suppress", "held")]
    assert result.get(timeout=10) == {
        "prompt": "kill",
        "text": " ".join(f"kill-{i}" for i in range(1, 11)),
    }
    time.sleep(2.5)
    assert len(notified(webhook, result.id)) == 1
    assert "WorkerLostError" in worker.output() or "exited" in worker.output()


@pytest.mark.long
def test_redis_pause_loses_no_event(
    app: Celery, book: RedisBook, webhook: Receiver, worker: CeleryWorker, client: redis.Redis
) -> None:
    import workers

    result = workers.generate.delay("pause", steps=8, delay=0.25)
    wait_for(lambda: (t := book.get(result.id)) is not None and t.state == "running", 20)
    client.client_pause(2000, all=True)
    task = settled(book, webhook, result.id)
    assert (task.state, task.attempts) == ("succeeded", 1)
    assert history(task) == ["start"] + ["progress"] * 8 + ["succeed"]
    assert [e.event.progress for e in task.history[1:-1]] == [12, 25, 37, 50, 62, 75, 87, 100]  # type: ignore[union-attr]
