"""Batches, the overdue query and listing: the same contract on every book."""

from __future__ import annotations

import pytest

from asyncbook import AsyncBook, AsyncBookError, UnknownTaskError

from ..support.events import progress, start, succeed


def test_apply_many_in_order_with_errors_in_place(book: AsyncBook) -> None:
    book.create(id="a", now_ms=0, ttl_ms=100, max_attempts=1)
    results = book.apply_many(
        [
            ("a", start(), "c1"),
            ("ghost", start(), "c2"),
            ("a", progress(101), "c3"),
            ("a", progress(50), "c3"),
            ("a", start(), "c1"),
        ]
    )
    assert not isinstance(results[0], AsyncBookError)
    assert results[0].reason == "started"
    assert isinstance(results[1], UnknownTaskError)
    assert isinstance(results[2], AsyncBookError)
    assert [getattr(r, "reason", None) for r in results[3:]] == ["progress", "duplicate-callback"]
    assert book.get("a").version == 2  # type: ignore[union-attr]


def test_expire_many(book: AsyncBook) -> None:
    for task_id in ("a", "b"):
        book.create(id=task_id, now_ms=0, ttl_ms=100, max_attempts=1)
    book.expire("b")
    results = book.expire_many(["a", "b", "ghost"])
    assert [getattr(r, "reason", None) for r in results[:2]] == ["expired", "duplicate-expire"]
    assert isinstance(results[2], UnknownTaskError)
    assert len(book.drain_notifications()) == 2


def test_overdue(book: AsyncBook) -> None:
    book.create(id="late", now_ms=0, ttl_ms=50, max_attempts=1)
    book.create(id="later", now_ms=0, ttl_ms=80, max_attempts=1)
    book.create(id="future", now_ms=0, ttl_ms=500, max_attempts=1)
    book.create(id="done", now_ms=0, ttl_ms=10, max_attempts=1)
    book.apply("done", start(at=1))
    book.apply("done", succeed(at=2))
    assert book.overdue(80) == ["late", "later"]
    assert book.overdue(80, limit=1) == ["late"]
    assert book.overdue(49) == []
    book.expire("late")
    assert book.overdue(1000) == ["later", "future"]


def test_list_tasks_newest_first_with_pages(book: AsyncBook) -> None:
    for index in range(5):
        book.create(id=f"t{index}", now_ms=0, ttl_ms=100, max_attempts=1)
    book.apply("t1", start())
    book.apply("t3", start())
    page = book.list_tasks(limit=2)
    assert [task.id for task in page.tasks] == ["t4", "t3"]
    assert page.next_after is not None
    page = book.list_tasks(limit=2, after=page.next_after)
    assert [task.id for task in page.tasks] == ["t2", "t1"]
    page = book.list_tasks(limit=2, after=page.next_after)
    assert [task.id for task in page.tasks] == ["t0"]
    assert page.next_after is None
    running = book.list_tasks(state="running")
    assert [task.id for task in running.tasks] == ["t3", "t1"]
    assert running.tasks[0].version == 1
    assert book.list_tasks(state="failed").tasks == ()


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"state": "done"}, "state"),
        ({"limit": 0}, "limit"),
        ({"limit": 1001}, "limit"),
        ({"after": "x"}, "after"),
        ({"after": "-1"}, "after"),
    ],
)
def test_list_tasks_bad_input(book: AsyncBook, kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(AsyncBookError) as caught:
        book.list_tasks(**kwargs)  # type: ignore[arg-type]
    assert caught.value.field == field


def test_results_without_history(book: AsyncBook) -> None:
    book.create(id="a", now_ms=0, ttl_ms=100, max_attempts=1)
    book.create(id="b", now_ms=0, ttl_ms=100, max_attempts=1)
    [started, again] = book.apply_many(
        [("a", start(), "c1"), ("a", start(), "c1")], full_task=False
    )
    assert not isinstance(started, AsyncBookError)
    assert not isinstance(again, AsyncBookError)
    assert (started.reason, started.task.version, started.task.history) == ("started", 1, ())
    assert (again.reason, again.task.state) == ("duplicate-callback", "running")
    book.apply("a", progress(30))
    book.apply("a", succeed())
    [expired, done] = book.expire_many(["b", "a"], full_task=False)
    assert not isinstance(expired, AsyncBookError)
    assert not isinstance(done, AsyncBookError)
    assert (expired.reason, expired.task.history) == ("expired", ())
    assert (done.reason, done.task.result_hash, done.task.history) == (
        "terminal-conflict",
        "h1",
        (),
    )
    full = book.get("a")
    assert full is not None
    delta = book.resume("a", 1, full_task=False)
    assert (delta.mode, [e.version for e in delta.events], delta.task.history) == (
        "delta",
        [2, 3],
        (),
    )
    assert delta.task == full.model_copy(update={"history": ()})
    assert book.resume("a", 3, full_task=False).task.history == ()
    assert book.resume("a", 1).task == full


def test_counts_by_state_and_reason(book: AsyncBook) -> None:
    for task_id in ("a", "b", "c"):
        book.create(id=task_id, now_ms=0, ttl_ms=100, max_attempts=1)
    book.apply("a", start(), "cb-a")
    book.apply("a", start(), "cb-a")
    book.apply("a", progress(10))
    book.apply("a", progress(10))
    book.expire("b")
    book.expire("b")
    with pytest.raises(AsyncBookError):
        book.apply("a", progress(500))
    assert book.count_by_state() == {
        "queued": 1,
        "running": 1,
        "succeeded": 0,
        "failed": 0,
        "expired": 1,
        "cancelled": 0,
    }
    assert book.transition_counts() == {
        "started": 1,
        "duplicate-callback": 1,
        "progress": 1,
        "duplicate-progress": 1,
        "expired": 1,
        "duplicate-expire": 1,
    }


def test_listing_without_histories(book: AsyncBook) -> None:
    book.create(id="a", now_ms=0, ttl_ms=100, max_attempts=1)
    book.apply("a", start())
    book.apply("a", succeed())
    [light] = book.list_tasks(full_task=False).tasks
    full = book.get("a")
    assert full is not None
    assert light == full.model_copy(update={"history": ()})
    assert light.result_hash == "h1"
    assert book.list_tasks().tasks == (full,)
