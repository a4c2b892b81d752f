"""The Celery integration in one process: start_worker, memory broker, fakeredis book."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import fakeredis
import pytest
from celery import Celery, Task
from celery.app.task import Context

from asyncbook import AsyncBookError, Notification
from asyncbook.celery import DEADLINE_HEADER, Integration, report_progress
from asyncbook.celery._tracking import callback_id, now_ms, result_hash

from ..support.celery import (
    CountingBook,
    history,
    memory_app,
    threaded_worker,
    unique,
    wait_for,
    wait_terminal,
)

DELIVERED: list[Notification] = []


def make_app() -> Celery:
    app = memory_app("inproc", asyncbook_sinks=[DELIVERED.append])

    @app.task(bind=True, shared=False, tracked=True, ttl=timedelta(seconds=30), max_retries=2)
    def generate(self: Task[Any, Any], steps: int = 4) -> dict[str, Any]:
        for step in range(1, steps + 1):
            time.sleep(0.01)
            report_progress(self, step * 100 // steps, cursor=f"chunk-{step}")
        return {"steps": steps}

    @app.task(bind=True, shared=False, tracked=True, ttl=30, max_retries=3)
    def flaky(self: Task[Any, Any], failures: int = 1) -> str:
        try:
            if self.request.retries < failures:
                raise ConnectionError(f"busy {self.request.retries}")
        except ConnectionError as error:
            raise self.retry(exc=error, countdown=0.05) from error
        return "ok"

    @app.task(bind=True, shared=False, tracked=True, ttl=30, max_retries=1)
    def doomed(self: Task[Any, Any]) -> None:
        raise ValueError("bad input")

    @app.task(bind=True, shared=False, tracked=True, ttl=0.6, max_retries=0)
    def late(self: Task[Any, Any]) -> str:
        time.sleep(1.2)
        return "late"

    @app.task(shared=False, tracked=True, ttl=30, acks_late=True)
    def noop_late() -> None:
        pass

    @app.task(shared=False, tracked=True, ttl=30)
    def noop() -> None:
        pass

    @app.task(bind=True, shared=False)
    def plain(self: Task[Any, Any]) -> str:
        report_progress(self, 50)
        return "plain"

    return app


@pytest.fixture(scope="module")
def app() -> Celery:
    return make_app()


@pytest.fixture(scope="module")
def book(app: Celery) -> CountingBook:
    return CountingBook(fakeredis.FakeRedis(server=fakeredis.FakeServer()), namespace="inproc")


@pytest.fixture(scope="module")
def integration(app: Celery, book: CountingBook) -> Iterator[Integration]:
    with threaded_worker(app, book) as integration:
        yield integration


def task_of(app: Celery, name: str) -> Task[Any, Any]:
    return app.tasks[f"tests.celery.test_inprocess.{name}"]


def run(app: Celery, name: str, *args: Any, **kwargs: Any) -> Any:
    return task_of(app, name).apply_async(args, kwargs)


def test_generate_succeeds_with_progress_in_one_round_trip(
    app: Celery, book: CountingBook, integration: Integration
) -> None:
    app.conf.asyncbook_flush_delay = 0.005
    before = len(book.calls)
    result = run(app, "generate", steps=4)
    assert result.get(timeout=10) == {"steps": 4}
    task = wait_terminal(book, result.id)
    assert task.state == "succeeded"
    assert task.attempts == 1
    assert task.max_attempts == 3
    assert history(task)[0] == "start"
    assert history(task)[-1] == "succeed"
    assert "progress" in history(task)
    assert task.progress == 100
    assert task.result_ref == f"celery-task-meta-{result.id}"
    assert task.result_hash == result_hash({"steps": 4})
    assert book.calls[before] == "create"
    assert book.calls.count("create") >= 1


def test_acks_late_execution_costs_one_synchronous_write(
    app: Celery, book: CountingBook, integration: Integration
) -> None:
    integration.recorder.flush_delay = 2.0  # the start can only ride with the result
    try:
        before = len(book.calls)
        result = run(app, "noop_late")
        result.get(timeout=10)
        task = wait_terminal(book, result.id, timeout=1.5)
        assert history(task) == ["start", "succeed"]
        assert book.calls[before:] == ["create", "apply_many"]
    finally:
        integration.recorder.flush_delay = 0.005


def test_early_ack_executions_share_background_writes(
    app: Celery, book: CountingBook, integration: Integration
) -> None:
    integration.recorder.flush_delay = 0.5
    try:
        before = len(book.calls)
        results = [run(app, "noop") for _ in range(6)]
        for result in results:
            result.get(timeout=10)
        for result in results:
            assert history(wait_terminal(book, result.id)) == ["start", "succeed"]
        calls = book.calls[before:]
        assert 1 <= calls.count("create") <= 6  # deferred creates may share round trips
        assert 1 <= calls.count("apply_many") <= 3
    finally:
        integration.recorder.flush_delay = 0.005


def test_retry_then_success(app: Celery, book: CountingBook, integration: Integration) -> None:
    result = run(app, "flaky", failures=2)
    assert result.get(timeout=45) == "ok"
    task = wait_terminal(book, result.id)
    assert task.state == "succeeded"
    assert task.attempts == 3
    assert history(task) == ["start", "fail", "start", "fail", "start", "succeed"]
    assert task.error == "ConnectionError: busy 1"


def test_retries_exhausted_fail_for_good(
    app: Celery, book: CountingBook, integration: Integration
) -> None:
    result = run(app, "flaky", failures=9)
    # Four attempts through the broker's retry scheduling: give a busy machine room.
    with pytest.raises(ConnectionError):
        result.get(timeout=45)
    task = wait_terminal(book, result.id)
    assert task.state == "failed"
    assert task.attempts == 4
    assert history(task) == ["start", "fail"] * 4


def test_failure_is_not_retried(app: Celery, book: CountingBook, integration: Integration) -> None:
    result = run(app, "doomed")
    with pytest.raises(ValueError, match="bad input"):
        result.get(timeout=10)
    task = wait_terminal(book, result.id)
    assert (task.state, task.attempts, task.error) == ("failed", 1, "ValueError: bad input")


def test_late_success_is_refused(app: Celery, book: CountingBook, integration: Integration) -> None:
    result = run(app, "late")
    wait_for(lambda: (t := book.get(result.id)) is not None and t.state == "running")
    time.sleep(0.7)
    assert integration.sweep().expired >= 1
    assert result.get(timeout=10) == "late"
    time.sleep(0.1)
    task = book.get(result.id)
    assert task is not None
    assert task.state == "expired"
    assert task.result_ref is None
    assert history(task) == ["start", "expire"]


def test_message_expires_at_the_deadline(
    app: Celery, book: CountingBook, integration: Integration
) -> None:
    captured: dict[str, Any] = {}

    def spy(headers: dict[str, Any] | None = None, **_: Any) -> None:
        if headers is not None:
            captured.update(headers)

    from celery import signals

    signals.before_task_publish.connect(spy, weak=False)
    try:
        result = run(app, "doomed")
    finally:
        signals.before_task_publish.disconnect(spy)
    stored = book.get(result.id)
    assert stored is not None
    assert captured[DEADLINE_HEADER] == stored.expires_at_ms
    expires = datetime.fromisoformat(captured["expires"])
    assert expires == datetime.fromtimestamp(stored.expires_at_ms / 1000, tz=UTC)
    with pytest.raises(ValueError, match="bad input"):
        result.get(timeout=10)


def test_expired_message_expires_the_task(
    app: Celery, book: CountingBook, integration: Integration
) -> None:
    # The book gives 30 s, the caller's own expiry is shorter: the earlier one wins.
    result = task_of(app, "generate").apply_async(kwargs={"steps": 1}, countdown=0.3, expires=0.1)
    task = wait_terminal(book, result.id)
    assert task.state == "expired"
    assert history(task) == ["expire"]


def test_a_revoked_running_task_is_cancelled(
    app: Celery, book: CountingBook, integration: Integration
) -> None:
    task_id = unique("revoked")
    book.create(id=task_id, now_ms=now_ms(), ttl_ms=60_000, max_attempts=1)
    book.apply(task_id, {"type": "start", "atMs": now_ms(), "worker": "w"})
    request = Context(id=task_id, retries=0)
    integration.outcomes.on_task_revoked(
        sender=task_of(app, "generate"), request=request, expired=False
    )
    task = book.get(task_id)
    assert task is not None
    assert (task.state, task.error) == ("cancelled", "revoked")
    integration.outcomes.on_task_revoked(
        sender=task_of(app, "generate"), request=request, expired=False, terminated=True
    )
    assert book.get(task_id) == task  # once cancelled, a second revoke changes nothing


def test_redelivered_signals_change_nothing_twice(
    app: Celery, book: CountingBook, integration: Integration
) -> None:
    result = run(app, "generate", steps=2)
    result.get(timeout=10)
    task = wait_terminal(book, result.id)
    # The message redelivered (acks_late) and run again: its start carries a callback id
    # of its own (a new execution), its success the same one. Nothing changes.
    start, success = book.apply_many(
        [
            (
                result.id,
                {"type": "start", "atMs": 1, "worker": "w"},
                callback_id(result.id, "start", 0, "another-execution"),
            ),
            (
                result.id,
                {"type": "succeed", "atMs": 2, "resultRef": "r", "resultHash": "h"},
                callback_id(result.id, "success", 0),
            ),
        ]
    )
    assert not isinstance(start, AsyncBookError)
    assert (start.changed, start.reason) == (False, "terminal-conflict")
    assert not isinstance(success, AsyncBookError)
    assert success.duplicate_callback
    assert book.get(result.id) == task


def test_untracked_tasks_are_untouched(
    app: Celery, book: CountingBook, integration: Integration
) -> None:
    before = len(book.calls)
    result = run(app, "plain")
    assert result.get(timeout=10) == "plain"
    assert book.get(result.id) is None
    assert book.calls[before:] == []


def test_progress_is_validated() -> None:
    app = make_app()
    generate = app.tasks["tests.celery.test_inprocess.generate"]
    with pytest.raises(AsyncBookError, match="progress"):
        report_progress(generate, 101)
    with pytest.raises(AsyncBookError, match="progress"):
        report_progress(generate, -1)
    report_progress(generate, 50)  # not installed: nothing to do


def test_each_terminal_task_notifies_once(
    app: Celery, book: CountingBook, integration: Integration
) -> None:
    results = [run(app, "generate", steps=1), run(app, "doomed")]
    for result in results:
        result.get(timeout=10, propagate=False)
        wait_terminal(book, result.id)
    wait_for(lambda: integration.deliver().delivered == 0 and DELIVERED)
    for result in results:
        notes = [n for n in DELIVERED if n.task_id == result.id]
        assert len(notes) == 1


def test_a_publisher_without_asyncbook_is_covered_by_the_worker(
    app: Celery, book: CountingBook, integration: Integration
) -> None:
    client = Celery("plain-client", broker="memory://", backend="cache+memory://")
    client.conf.broker_connection_retry_on_startup = True
    result = client.send_task("tests.celery.test_inprocess.noop", queue=app.conf.task_default_queue)
    task = wait_terminal(book, result.id)
    assert history(task) == ["start", "succeed"]
    assert task.max_attempts == 4  # Celery's default max_retries (3) + 1
    # The worker records the message's info when it creates the task.
    info = book.info(result.id)
    assert info is not None
    assert (info.name, info.args_repr, info.queue) == (
        "tests.celery.test_inprocess.noop",
        "()",
        app.conf.task_default_queue,
    )


def test_an_idle_in_process_worker_stops_at_once() -> None:
    # Celery's synloop drains the memory broker for 2 s per cycle and once more after the
    # shutdown: on kombu's own memory transport this stop took 2 to 4 s, in every test
    # that starts a worker. The test apps' transport drains for 0.05 s at a time.
    app = memory_app("stop")
    book = CountingBook(fakeredis.FakeRedis(server=fakeredis.FakeServer()), namespace="stop")
    with threaded_worker(app, book):
        time.sleep(0.1)  # the worker is idle, inside a drain
        stopping = time.monotonic()
    assert time.monotonic() - stopping < 1.5
