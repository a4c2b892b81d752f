"""The cancel extension, on every book (memory, Redis, fakeredis, Cluster)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from asyncbook import AsyncBook, AsyncBookError, CancelEvent, Reason, apply_async_event
from asyncbook import create_async_task as new_task

from ..support.events import expire, fail, start, succeed


def queued(book: AsyncBook, task_id: str = "c", ttl: int = 1000) -> None:
    book.create(id=task_id, now_ms=0, ttl_ms=ttl, max_attempts=2)


def test_cancel_a_queued_task(book: AsyncBook) -> None:
    queued(book)
    result = book.cancel("c", "user asked", at_ms=5)
    assert (result.reason, result.changed, result.notify, result.duplicate) == (
        Reason.CANCELLED,
        True,
        True,
        False,
    )
    task = result.task
    assert (task.state, task.error, task.progress, task.version) == (
        "cancelled",
        "user asked",
        0,
        1,
    )
    assert task.history[0].event == CancelEvent(at_ms=5, reason="user asked")
    assert book.overdue(10**15) == []  # it left the deadline index
    assert [n.state for n in book.drain_notifications()] == ["cancelled"]
    assert book.count_by_state()["cancelled"] == 1
    assert [t.id for t in book.list_tasks(state="cancelled").tasks] == ["c"]


def test_cancel_a_running_task_keeps_its_progress(book: AsyncBook) -> None:
    queued(book)
    book.apply("c", start(at=1))
    book.apply("c", {"type": "progress", "atMs": 2, "progress": 40, "cursor": "k"})
    result = book.cancel("c", at_ms=3)
    assert result.task.state == "cancelled"
    assert result.task.progress == 40
    assert result.task.error == "cancelled"  # no reason given


def test_blank_reason_means_cancelled(book: AsyncBook) -> None:
    queued(book)
    assert book.cancel("c", " \u3000", at_ms=1).task.error == "cancelled"


def test_cancel_twice_is_a_duplicate_and_notifies_once(book: AsyncBook) -> None:
    queued(book)
    book.cancel("c", at_ms=1)
    again = book.cancel("c", at_ms=2)
    assert (again.reason, again.duplicate, again.changed) == ("duplicate-cancel", True, False)
    assert len(book.drain_notifications()) == 1


@pytest.mark.parametrize(
    ("finish", "state"),
    [
        (lambda b: (b.apply("c", start()), b.apply("c", succeed())), "succeeded"),
        (lambda b: (b.apply("c", start()), b.apply("c", fail())), "failed"),
        (lambda b: b.expire("c"), "expired"),
    ],
)
def test_cancel_on_another_terminal_state_is_a_conflict(
    book: AsyncBook, finish: Callable[[AsyncBook], object], state: str
) -> None:
    queued(book)

    finish(book)
    result = book.cancel("c", at_ms=5)
    assert (result.reason, result.changed, result.duplicate) == ("terminal-conflict", False, False)
    assert result.task.state == state


def test_everything_else_on_a_cancelled_task_is_a_conflict(book: AsyncBook) -> None:
    queued(book)
    book.cancel("c", at_ms=1)
    for event in (start(at=2), succeed(at=2), fail(at=2), expire(at=2)):
        assert book.apply("c", event).reason == "terminal-conflict"
    assert book.expire("c").reason == "terminal-conflict"
    delivery = book.deliver_result("c", "key", 5)
    assert (delivery.ok, delivery.reason) == (False, "not-succeeded")


def test_a_cancel_at_or_after_the_deadline_expires_the_task(book: AsyncBook) -> None:
    queued(book, ttl=100)
    result = book.cancel("c", "too late", at_ms=100)
    assert (result.reason, result.task.state) == ("expired", "expired")


def test_cancel_with_a_callback_id_counts_once(book: AsyncBook) -> None:
    queued(book)
    book.cancel("c", at_ms=1, callback_id="cancel-1")
    again = book.cancel("c", at_ms=1, callback_id="cancel-1")
    assert (again.reason, again.duplicate_callback) == ("duplicate-callback", True)


def test_cancel_defaults_to_the_books_clock(book: AsyncBook) -> None:
    book.create(id="c", now_ms=book.now_ms(), ttl_ms=60_000, max_attempts=1)
    event = book.cancel("c").task.history[0].event
    assert isinstance(event, CancelEvent)
    assert abs(event.at_ms - book.now_ms()) < 5_000


def test_bad_cancel_input_names_the_field_and_changes_nothing(book: AsyncBook) -> None:
    queued(book)
    with pytest.raises(AsyncBookError) as caught:
        book.cancel("c", 5, at_ms=1)  # type: ignore[arg-type]
    assert caught.value.field == "event.reason"
    with pytest.raises(AsyncBookError) as caught:
        book.cancel("c", at_ms=-1)
    assert caught.value.field == "event.atMs"
    task = book.get("c")
    assert task is not None
    assert task.state == "queued"
    with pytest.raises(AsyncBookError):
        book.cancel("unknown", at_ms=1)


def test_the_pure_machine_agrees() -> None:
    task = new_task(id="p", now_ms=0, ttl_ms=10, max_attempts=1)
    cancelled = apply_async_event(task, CancelEvent(at_ms=1, reason="stop")).task
    assert cancelled.terminal
    assert apply_async_event(cancelled, CancelEvent(at_ms=2)).reason == "duplicate-cancel"
