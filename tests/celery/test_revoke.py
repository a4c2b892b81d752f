"""A revoke, the Celery way, reads ``cancelled`` in the book as soon as it returns.

In one process, on a memory broker no worker consumes and a fakeredis book: every way
Celery revokes (``app.control.revoke`` of one id or several, ``AsyncResult.revoke``,
``GroupResult.revoke``, ``terminate=True``), the app's own control class kept, and
``uninstall`` giving the previous one back. The same with real workers is in
``test_lifecycle.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
from celery import Celery, group
from celery.app.control import Control
from celery.bin.celery import celery
from celery.result import AsyncResult, GroupResult
from click.testing import CliRunner

from asyncbook import RedisBook
from asyncbook.celery import cancel, install, uninstall
from asyncbook.celery._revoke import BookControl

from ..support.books import fakeredis_book
from ..support.celery import history, memory_app, unique


class RecordingControl(Control):
    """An app's own control class: records what it broadcasts."""

    sent: ClassVar[list[tuple[str, Any]]] = []

    def broadcast(self, command: str, arguments: Any = None, *args: Any, **kwargs: Any) -> Any:
        RecordingControl.sent.append((command, arguments))
        return None  # nobody to send it to


def make_app(control: Any = None) -> Celery:
    app = memory_app(
        "revoke",
        control=control,
        task_default_queue=unique("nobody-consumes"),
        asyncbook_retry_for=0.4,
    )

    @app.task(shared=False, tracked=True, ttl=600)
    def tracked_job() -> None: ...

    @app.task(shared=False)
    def plain_job() -> None: ...

    return app


CLI_APP = make_app()
"""The app ``celery -A tests.celery.test_revoke:CLI_APP`` loads."""


@pytest.fixture
def book() -> RedisBook:
    return fakeredis_book("revoke")


@pytest.fixture
def app(book: RedisBook) -> Iterator[Celery]:
    app = make_app()
    install(app, book)
    yield app
    uninstall(app)


def publish(app: Celery, name: str = "tracked_job") -> AsyncResult[Any]:
    task = next(task for key, task in app.tasks.items() if key.endswith(name))
    result: AsyncResult[Any] = task.delay()
    return result


def state(book: RedisBook, task_id: str) -> tuple[str, str | None]:
    task = book.get(task_id)
    assert task is not None
    return task.state.value, task.error


def test_revoke_of_a_queued_task_reads_cancelled_when_it_returns(
    app: Celery, book: RedisBook
) -> None:
    result = publish(app)  # a deferred create: revoke writes it first
    app.control.revoke(result.id)
    assert state(book, result.id) == ("cancelled", "revoked")
    task = book.get(result.id)
    assert task is not None
    assert history(task) == ["cancel"]
    assert len(book.drain_notifications()) == 1
    app.control.revoke(result.id)  # again: nothing changes, nothing more is notified
    assert book.drain_notifications() == []


def test_every_way_celery_revokes_cancels_in_the_book(app: Celery, book: RedisBook) -> None:
    several = [publish(app) for _ in range(3)]
    app.control.revoke([result.id for result in several])
    assert [state(book, result.id) for result in several] == [("cancelled", "revoked")] * 3

    one = publish(app)
    one.revoke()
    assert state(book, one.id) == ("cancelled", "revoked")

    killed = publish(app)
    app.control.revoke(killed.id, terminate=True, signal="SIGKILL")
    assert state(book, killed.id) == ("cancelled", "terminated")

    tracked = next(task for key, task in app.tasks.items() if key.endswith("tracked_job"))
    members = group(tracked.s(), tracked.s()).apply_async()
    assert isinstance(members, GroupResult)
    members.revoke()
    assert [state(book, member.id) for member in members.results] == [("cancelled", "revoked")] * 2


def test_untracked_unknown_and_ended_ids_are_left_alone(app: Celery, book: RedisBook) -> None:
    plain = publish(app, "plain_job")
    done = publish(app)
    book.cancel(done.id, "earlier")
    app.control.revoke([plain.id, "never-published", done.id])
    assert book.get(plain.id) is None
    assert book.get("never-published") is None
    assert state(book, done.id) == ("cancelled", "earlier")


def test_cancel_writes_its_reason_once(app: Celery, book: RedisBook) -> None:
    result = publish(app)
    answer = cancel(app, result.id, reason="user left")
    assert answer.reason == "cancelled"
    assert state(book, result.id) == ("cancelled", "user left")
    assert book.transition_counts().get("duplicate-cancel", 0) == 0


def test_an_unreachable_book_does_not_stop_the_revoke(
    app: Celery, book: RedisBook, caplog: pytest.LogCaptureFixture
) -> None:
    # An earlier test's start_worker may have left the logging level at ERROR.
    caplog.set_level(logging.WARNING, logger="asyncbook.celery")
    result = publish(app)
    book.client.connection_pool.disconnect()
    server: Any = book.client.connection_pool.connection_kwargs["server"]
    server.connected = False
    try:
        app.control.revoke(result.id)  # broadcast all the same
    finally:
        server.connected = True
    assert "is not in the book yet" in caplog.text


def test_the_apps_own_control_class_is_kept_and_uninstall_restores_it(
    book: RedisBook,
) -> None:
    app = make_app(control=RecordingControl)
    install(app, book)
    assert isinstance(app.control, RecordingControl)
    assert isinstance(app.control, BookControl)
    result = publish(app)
    app.control.revoke(result.id)
    assert state(book, result.id) == ("cancelled", "revoked")
    assert RecordingControl.sent[-1][0] == "revoke"
    uninstall(app)
    restored: object = app.control_cls
    assert restored is RecordingControl
    assert not isinstance(app.control, BookControl)
    assert isinstance(app.control, RecordingControl)

    default = make_app()
    install(default, book)
    assert isinstance(default.control, BookControl)
    uninstall(default)
    assert default.control_cls == "celery.app.control:Control"
    assert type(default.control) is Control


def test_celery_control_revoke_from_the_command_line(book: RedisBook) -> None:
    install(CLI_APP, book)
    try:
        result = publish(CLI_APP)
        command = ["-A", f"{__name__}:CLI_APP", "control", "revoke", result.id, "--timeout", "0.1"]
        ran = CliRunner().invoke(celery, command)
        assert "No nodes replied" in ran.output  # broadcast, and no worker is up
        assert state(book, result.id) == ("cancelled", "revoked")
    finally:
        uninstall(CLI_APP)
