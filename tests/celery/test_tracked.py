"""Tracking a task without editing its definition (``tracked``, ``TrackTasks`` and
Celery's ``task_annotations``), and what a retry records, with an in-process worker on a
memory broker and a fakeredis book.

One app holds every way of tracking but the annotation for every task, which has an app
(and a worker) of its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from celery import Celery, Task, shared_task
from celery._state import get_current_app
from celery.contrib.testing.worker import start_worker
from celery.local import PromiseProxy

from asyncbook import AsyncBookError, AsyncTask, MemoryBook, RedisBook
from asyncbook.celery import TrackTasks, async_book_of, book_of, install, tracked, uninstall
from asyncbook.celery._tracking import is_tracked

from ..support.books import delete_namespace, fakeredis_book
from ..support.celery import history, memory_app, unique, wait_terminal

SHARED_NAME = unique("thirdparty.tasks.resize")


@contextmanager
def working(app: Celery) -> Iterator[RedisBook]:
    """``app`` installed on a fresh book, with a worker; yields the book."""
    book = fakeredis_book("tracked")
    install(app, book)
    try:
        with start_worker(app, perform_ping_check=False, pool="threads", concurrency=2):
            yield book
    finally:
        uninstall(app)


def ran(book: RedisBook, task: Any, *args: Any) -> AsyncTask:
    """Run ``task`` through the worker; the book's record of it, once it ended."""
    result = task.apply_async(args)
    result.get(timeout=10, propagate=False)
    return wait_terminal(book, result.id)


@dataclass
class Shop:
    """The app's tasks, and what was seen while they were defined."""

    book: RedisBook
    tasks: dict[str, Any]
    made_early: bool


@pytest.fixture(scope="module")
def shop() -> Iterator[Shop]:
    media = TrackTasks("media.*", ttl=45, max_retries=0)
    app = memory_app("tracked", task_annotations=[{"mail.send": {"tracked": True}}, media])

    @tracked(ttl=timedelta(minutes=5), max_retries=4)
    @app.task(bind=True, shared=False)
    def resize(self: Task[Any, Any], size: int) -> int:
        return size * 2

    @tracked
    @app.task(shared=False)
    def ping() -> str:
        return "pong"

    # @tracked did not make the tasks before the app is ready
    made_early = not isinstance(resize, PromiseProxy) or resize.__evaluated__()

    @app.task(shared=False)
    def thumbnail(path: str) -> str:  # as if imported from another package
        return path

    @app.task(shared=False, name="mail.send")
    def send() -> str:
        return "sent"

    @app.task(shared=False, name="media.resize")
    def media_resize() -> str:
        return "resized"

    @app.task(shared=False, name="billing.charge")
    def charge() -> str:
        return "charged"

    @app.task(bind=True, shared=False, tracked=True, ttl=30, max_retries=1)
    def fetch(self: Task[Any, Any]) -> str:
        if self.request.retries == 0:
            raise self.retry(exc=ConnectionError("upstream busy"), countdown=0.05)
        return "fetched"

    @app.task(bind=True, shared=False, tracked=True, ttl=30, max_retries=1)
    def convert(self: Task[Any, Any]) -> str:
        if self.request.retries == 0:
            try:
                raise ValueError("while handling")
            except ValueError:
                raise self.retry(exc=TimeoutError("slow"), countdown=0.05) from None
        return "converted"

    app.finalize()
    tracked(thumbnail, ttl=120, max_attempts=2)  # a task made already
    before = get_current_app()
    app.set_current()  # a shared task is the current app's
    try:

        @shared_task(name=SHARED_NAME)
        def shared(size: int) -> int:
            return size

        tracked(shared, ttl=60)
    finally:
        before.set_current()
    tasks = {
        "app": app,
        "media": media,
        "resize": resize,
        "ping": ping,
        "thumbnail": thumbnail,
        "send": send,
        "media_resize": media_resize,
        "charge": charge,
        "fetch": fetch,
        "convert": convert,
    }
    with working(app) as book:
        yield Shop(book, tasks, made_early)


def test_tracked_stacked_above_app_task_makes_no_task_early(shop: Shop) -> None:
    assert not shop.made_early
    task = ran(shop.book, shop.tasks["resize"], 21)
    assert (task.state, task.max_attempts) == ("succeeded", 5)
    assert task.expires_at_ms - task.history[0].event.at_ms <= 5 * 60_000
    assert ran(shop.book, shop.tasks["ping"]).state == "succeeded"


def test_tracked_applied_to_a_task_defined_elsewhere(shop: Shop) -> None:
    task = ran(shop.book, shop.tasks["thumbnail"], "a.png")
    assert (task.state, task.max_attempts, history(task)) == (
        "succeeded",
        2,
        ["start", "succeed"],
    )


def test_tracked_applied_to_a_shared_task_tracks_the_current_apps(shop: Shop) -> None:
    app = shop.tasks["app"]
    assert is_tracked(app.tasks[SHARED_NAME])
    assert ran(shop.book, app.tasks[SHARED_NAME], 3).state == "succeeded"


def test_annotations_by_name_and_by_glob(shop: Shop) -> None:
    assert ran(shop.book, shop.tasks["send"]).state == "succeeded"
    resized = ran(shop.book, shop.tasks["media_resize"])
    assert (resized.state, resized.max_attempts) == ("succeeded", 1)
    result = shop.tasks["charge"].apply_async()
    result.get(timeout=10)
    assert shop.book.get(result.id) is None  # untouched
    assert "media.*" in repr(shop.tasks["media"])


def test_a_retry_given_an_exception_outside_except_records_it(shop: Shop) -> None:
    expected = [("fetch", "ConnectionError: upstream busy"), ("convert", "TimeoutError: slow")]
    for name, error in expected:
        ended = ran(shop.book, shop.tasks[name])
        assert ended.state == "succeeded"
        fails = [entry.event for entry in ended.history if entry.event.type == "fail"]
        assert [getattr(fail, "error", None) for fail in fails] == [error]


def test_an_annotation_for_every_task_tracks_them_but_not_celerys_or_asyncbooks() -> None:
    app = memory_app("tracked-all", task_annotations={"*": {"tracked": True, "ttl": 90}})

    @app.task(shared=False)
    def plain(x: int) -> int:
        return x

    with working(app) as book:
        task = ran(book, plain, 1)
        assert task.state == "succeeded"
        assert task.expires_at_ms - task.history[0].event.at_ms <= 90_000
        builtin = [name for name in app.tasks if name.startswith(("celery.", "asyncbook."))]
        assert "asyncbook.sweep" in builtin
        assert "celery.chord_unlock" in builtin
        for name in builtin:
            assert getattr(app.tasks[name], "tracked", None) is True  # annotated by Celery
            assert not is_tracked(app.tasks[name])  # and still not tracked


def test_bad_tracked_input_names_the_field() -> None:
    def plain(x: int) -> int:
        return x

    with pytest.raises(AsyncBookError) as caught:
        tracked(plain)
    assert caught.value.field == "task"
    assert "above @app.task" in caught.value.message
    bad: list[tuple[dict[str, Any], str]] = [
        ({"ttl": -1}, "ttl"),
        ({"max_retries": -1}, "max_retries"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"heartbeat_timeout": "soon"}, "heartbeat_timeout"),
    ]
    for options, field in bad:
        with pytest.raises(AsyncBookError) as caught:
            tracked(**options)
        assert caught.value.field == field
    with pytest.raises(AsyncBookError) as caught:
        TrackTasks()
    assert caught.value.field == "patterns"


def test_book_of_is_the_book_install_built() -> None:
    app = memory_app("book-of")
    with pytest.raises(AsyncBookError) as caught:
        book_of(app)
    assert (caught.value.code, caught.value.field) == ("invalid-request", "app")
    assert "install(app)" in caught.value.message
    given = fakeredis_book("given")
    install(app, given)
    try:
        assert book_of(app) is given
    finally:
        uninstall(app)
    built = memory_app(
        "book-of", asyncbook_redis_url="redis://127.0.0.1:6379/10", asyncbook_namespace="x"
    )
    install(built)
    try:
        found = book_of(built)
        assert isinstance(found, RedisBook)
        assert found.namespace == "x"
    finally:
        uninstall(built)


def test_async_book_of_reads_the_same_book_from_asyncio() -> None:
    app = memory_app(
        "async-book-of",
        asyncbook_redis_url="redis://127.0.0.1:6379/10",
        asyncbook_namespace=unique("abo"),
    )
    with pytest.raises(AsyncBookError) as caught:
        async_book_of(app)
    assert caught.value.field == "app"
    install(app)
    book = book_of(app)
    assert isinstance(book, RedisBook)
    try:
        book.create(id="job-1", now_ms=book.now_ms(), ttl_ms=60_000, max_attempts=1)

        async def read() -> tuple[str, str]:
            async with async_book_of(app) as twin:
                task = await twin.get("job-1")
                assert task is not None
                return twin.namespace, task.state.value

        assert asyncio.run(read()) == (book.namespace, "queued")
    finally:
        delete_namespace(book.client, book.namespace)
        uninstall(app)


def test_async_book_of_refuses_a_book_without_an_asyncio_twin() -> None:
    app = memory_app("async-book-of")
    install(app, MemoryBook())  # a fakeredis book has one now (issue 31): below
    try:
        with pytest.raises(AsyncBookError) as caught:
            async_book_of(app)
        assert caught.value.field == "app"
        assert "AsyncRedisBook.from_url" in caught.value.message
    finally:
        uninstall(app)


def test_async_book_of_a_fakeredis_book_reads_its_fake_server() -> None:
    app = memory_app("async-book-of")
    book = fakeredis_book("f")
    install(app, book)
    try:
        book.create(id="job-1", now_ms=book.now_ms(), ttl_ms=60_000, max_attempts=1)

        async def read() -> str | None:
            async with async_book_of(app) as twin:
                task = await twin.get("job-1")
                return None if task is None else task.state.value

        assert asyncio.run(read()) == "queued"
    finally:
        uninstall(app)
