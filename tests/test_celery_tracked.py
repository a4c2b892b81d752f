"""Tracking a task without editing its definition (``tracked``, ``TrackTasks`` and
Celery's ``task_annotations``), and what a retry records, with an in-process worker on a
memory broker and a fakeredis book."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import fakeredis
import pytest
from celery import Celery, Task, shared_task
from celery._state import get_current_app
from celery.contrib.testing.worker import start_worker
from celery.local import PromiseProxy

from asyncbook import AsyncBookError, AsyncTask, RedisBook
from asyncbook.celery import TrackTasks, book_of, install, tracked, uninstall
from asyncbook.celery._tracking import is_tracked

from .celery_support import history, memory_app, unique, wait_terminal


def make_app(**conf: Any) -> Celery:
    return memory_app("tracked", **conf)


def new_book() -> RedisBook:
    return RedisBook(fakeredis.FakeRedis(server=fakeredis.FakeServer()), namespace="tracked")


@contextmanager
def working(app: Celery, book: RedisBook) -> Iterator[None]:
    install(app, book)
    try:
        with start_worker(app, perform_ping_check=False, pool="threads", concurrency=2):
            yield
    finally:
        uninstall(app)


def ran(book: RedisBook, task: Any, *args: Any) -> AsyncTask:
    """Run ``task`` through the worker; the book's record of it, once it ended."""
    result = task.apply_async(args)
    result.get(timeout=10, propagate=False)
    return wait_terminal(book, result.id)


def test_tracked_stacked_above_app_task_makes_no_task_early() -> None:
    app = make_app()

    @tracked(ttl=timedelta(minutes=5), max_retries=4)
    @app.task(bind=True, shared=False)
    def resize(self: Task[Any, Any], size: int) -> int:
        return size * 2

    @tracked
    @app.task(shared=False)
    def ping() -> str:
        return "pong"

    # @tracked did not make the tasks before the app is ready
    assert isinstance(resize, PromiseProxy)
    assert not resize.__evaluated__()
    book = new_book()
    with working(app, book):
        task = ran(book, resize, 21)
        assert (task.state, task.max_attempts) == ("succeeded", 5)
        assert task.expires_at_ms - task.history[0].event.at_ms <= 5 * 60_000
        assert ran(book, ping).state == "succeeded"


def test_tracked_applied_to_a_task_defined_elsewhere() -> None:
    app = make_app()

    @app.task(shared=False)
    def thumbnail(path: str) -> str:  # as if imported from another package
        return path

    app.finalize()
    assert tracked(thumbnail, ttl=120, max_attempts=2) is thumbnail
    book = new_book()
    with working(app, book):
        task = ran(book, thumbnail, "a.png")
        assert (task.state, task.max_attempts, history(task)) == (
            "succeeded",
            2,
            ["start", "succeed"],
        )


def test_tracked_applied_to_a_shared_task_tracks_the_current_apps() -> None:
    app = make_app()
    name = unique("thirdparty.tasks.resize")

    @shared_task(name=name)
    def resize(size: int) -> int:
        return size

    before = get_current_app()
    app.set_current()
    try:
        tracked(resize, ttl=60)
        assert is_tracked(app.tasks[name])
        book = new_book()
        with working(app, book):
            assert ran(book, app.tasks[name], 3).state == "succeeded"
    finally:
        before.set_current()


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


def test_an_annotation_for_every_task_tracks_them_but_not_celerys_or_asyncbooks() -> None:
    app = make_app(task_annotations={"*": {"tracked": True, "ttl": 90}})

    @app.task(shared=False)
    def plain(x: int) -> int:
        return x

    book = new_book()
    with working(app, book):
        task = ran(book, plain, 1)
        assert task.state == "succeeded"
        assert task.expires_at_ms - task.history[0].event.at_ms <= 90_000
        builtin = [name for name in app.tasks if name.startswith(("celery.", "asyncbook."))]
        assert "asyncbook.sweep" in builtin
        assert "celery.chord_unlock" in builtin
        for name in builtin:
            assert getattr(app.tasks[name], "tracked", None) is True  # annotated by Celery
            assert not is_tracked(app.tasks[name])  # and still not tracked


def test_annotations_by_name_and_by_glob() -> None:
    media = TrackTasks("media.*", ttl=45, max_retries=0)
    app = make_app(task_annotations=[{"mail.send": {"tracked": True}}, media])

    @app.task(shared=False, name="mail.send")
    def send() -> str:
        return "sent"

    @app.task(shared=False, name="media.resize")
    def resize() -> str:
        return "resized"

    @app.task(shared=False, name="billing.charge")
    def charge() -> str:
        return "charged"

    book = new_book()
    with working(app, book):
        assert ran(book, send).state == "succeeded"
        resized = ran(book, resize)
        assert (resized.state, resized.max_attempts) == ("succeeded", 1)
        result = charge.apply_async()
        result.get(timeout=10)
        assert book.get(result.id) is None  # untouched
    assert "media.*" in repr(media)


def test_a_retry_given_an_exception_outside_except_records_it() -> None:
    app = make_app()

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

    book = new_book()
    with working(app, book):
        expected = [(fetch, "ConnectionError: upstream busy"), (convert, "TimeoutError: slow")]
        for task, error in expected:
            ended = ran(book, task)
            assert ended.state == "succeeded"
            fails = [entry.event for entry in ended.history if entry.event.type == "fail"]
            assert [getattr(fail, "error", None) for fail in fails] == [error]


def test_book_of_is_the_book_install_built() -> None:
    app = make_app()
    with pytest.raises(AsyncBookError) as caught:
        book_of(app)
    assert (caught.value.code, caught.value.field) == ("invalid-request", "app")
    assert "install(app)" in caught.value.message
    book = new_book()
    install(app, book)
    try:
        assert book_of(app) is book
    finally:
        uninstall(app)
    built = make_app(asyncbook_redis_url="redis://127.0.0.1:6379/10", asyncbook_namespace="x")
    install(built)
    try:
        found = book_of(built)
        assert isinstance(found, RedisBook)
        assert found.namespace == "x"
    finally:
        uninstall(built)
