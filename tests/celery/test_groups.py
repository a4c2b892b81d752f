"""Celery groups and chords in the book: members recorded at publish, one group notification."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery, Task, chord, group
from celery.contrib.testing.worker import start_worker

from asyncbook import RedisBook
from asyncbook.celery import apply_group, cancel, install, report_progress, uninstall

from ..support.books import fakeredis_book
from ..support.celery import CELERY_URL as URL
from ..support.celery import MEMORY_BROKER, close_result_backend, unique, wait_for

pytestmark = [
    pytest.mark.redis,
    pytest.mark.timeout(90),
    # Celery's Redis result backend calls redis-py's SETEX, which redis-py 8 deprecates.
    pytest.mark.filterwarnings("ignore:Call to deprecated setex:DeprecationWarning"),
]


def make_app() -> Celery:
    app = Celery(unique("groups"), broker="memory://", backend=URL, set_as_current=False)
    app.conf.update(
        task_default_queue=unique("q"),
        broker_connection_retry_on_startup=True,
        **MEMORY_BROKER,
        worker_hijack_root_logger=False,
        asyncbook_flush_delay=0.005,
        result_expires=600,
        # One backend for every thread (Celery keeps one per thread otherwise), so the
        # fixture closes the worker threads' Redis clients too.
        result_backend_thread_safe=True,
    )

    @app.task(bind=True, shared=False, tracked=True, ttl=60, name="groups.step")
    def step(self: Task[Any, Any], n: int) -> int:
        for percent in (50, 100):
            report_progress(self, percent, cursor=f"{n}-{percent}")
        return n

    @app.task(bind=True, shared=False, tracked=True, ttl=60, max_retries=2, name="groups.flaky")
    def flaky(self: Task[Any, Any], n: int) -> int:
        if self.request.retries == 0:
            raise self.retry(exc=ConnectionError("busy"), countdown=0.05)
        return n

    @app.task(shared=False, name="groups.total")
    def total(values: list[int]) -> int:
        return sum(values)

    return app


@pytest.fixture
def app() -> Iterator[Celery]:
    app = make_app()
    yield app
    close_result_backend(app)
    app.close()
    client = redis.Redis.from_url(URL)
    for key in client.scan_iter(match="celery-task-meta-*", count=1000):
        client.delete(key)
    client.close()


@pytest.fixture
def book() -> RedisBook:
    return fakeredis_book("groups")


@pytest.mark.long
def test_a_chord_of_20_with_retries_and_a_cancel_notifies_its_group_once(
    app: Celery, book: RedisBook
) -> None:
    install(app, book)
    step, flaky, total = (app.tasks[f"groups.{name}"] for name in ("step", "flaky", "total"))
    header = [step.s(n) for n in range(17)] + [flaky.s(17), flaky.s(18)]
    header.append(step.s(19).set(countdown=1.5))  # still waiting when it is cancelled
    work = chord(header, total.s())
    try:
        with start_worker(app, perform_ping_check=False):
            apply_group(work)
            group_id = str(work.tasks.id)
            waiting = str(work.tasks.tasks[-1].id)
            cancel(app, waiting, reason="not needed")

            def ended() -> bool:
                summary = book.group(group_id)
                return summary is not None and summary.ended

            wait_for(ended, timeout=30)
            time.sleep(2)  # the cancelled member's countdown passes: nothing may change
    finally:
        uninstall(app)
    summary = book.group(group_id)
    assert summary is not None
    assert (summary.total, summary.members) == (20, 20)
    assert summary.counts["succeeded"] == 19
    assert summary.counts["cancelled"] == 1
    (note,) = book.drain_group_notifications()
    assert note.group_id == group_id
    assert note.counts == {"succeeded": 19, "failed": 0, "expired": 0, "cancelled": 1}
    members = book.group_members(group_id)
    assert len(members) == 20
    assert {task.attempts for task in members if task.id != waiting} >= {1, 2}
    assert book.drain_group_notifications() == []


def test_a_plain_group_is_counted_without_apply_group(app: Celery, book: RedisBook) -> None:
    install(app, book)
    step = app.tasks["groups.step"]
    work = group(step.s(n) for n in range(5))
    try:
        with start_worker(app, perform_ping_check=False):
            result = work.apply_async()
            result.get(timeout=20)
            wait_for(
                lambda: (
                    (s := book.group(str(result.id))) is not None and s.counts["succeeded"] == 5
                ),
                timeout=20,
            )
    finally:
        uninstall(app)
    summary = book.group(str(result.id))
    assert summary is not None
    assert (summary.members, summary.total, summary.progress) == (5, None, 100)
    assert book.drain_group_notifications() == []  # its size was never declared
    book.seal_group(str(result.id), 5)
    assert len(book.drain_group_notifications()) == 1
