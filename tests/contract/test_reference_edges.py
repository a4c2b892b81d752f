"""Edges where a layout once parted from the reference (issue 30): the empty callback id is
an id like any other, global over every shard; a blank idempotency key (as JavaScript's
``trim()`` sees it) is refused before anything else; a start naming the empty worker."""

from __future__ import annotations

import pytest

from asyncbook import AsyncBookError

from ..support.books import BookFactory
from ..support.events import start

TASKS = [f"t{n}" for n in range(12)]
"""Enough tasks to fill every shard of four and most of sixteen."""


def test_the_empty_callback_id_is_global(make_book: BookFactory) -> None:
    book = make_book()
    for task_id in TASKS:
        book.create(id=task_id, now_ms=0, ttl_ms=100, max_attempts=1)
    first = book.apply(TASKS[0], start(), "")
    assert (first.reason, first.duplicate_callback) == ("started", False)
    for task_id in TASKS:
        again = book.apply(task_id, start(), "")
        assert (again.reason, again.duplicate_callback) == ("duplicate-callback", True), task_id
        assert again.task.state == ("running" if task_id == TASKS[0] else "queued")
        cancelled = book.cancel(task_id, callback_id="")
        assert cancelled.reason == "duplicate-callback", task_id


def test_an_empty_callback_id_of_a_refused_apply_stays_free(make_book: BookFactory) -> None:
    book = make_book()
    for task_id in TASKS:
        book.create(id=task_id, now_ms=0, ttl_ms=100, max_attempts=1)
    with pytest.raises(AsyncBookError) as caught:
        book.apply("nobody", start(), "")
    assert (caught.value.code, caught.value.field) == ("invalid-request", "taskId")
    assert book.apply(TASKS[-1], start(), "").reason == "started"
    assert book.apply(TASKS[0], start(), "").reason == "duplicate-callback"


@pytest.mark.parametrize("key", ["", " ", "\ufeff", "\u3000", "\u2028"])
def test_a_blank_key_is_refused_first(make_book: BookFactory, key: str) -> None:
    book = make_book()
    for task_id in TASKS:
        book.create(id=task_id, now_ms=0, ttl_ms=100, max_attempts=1)
    for task_id in [*TASKS, "nobody"]:
        with pytest.raises(AsyncBookError) as caught:
            book.deliver_result(task_id, key, -1)
        assert (caught.value.code, caught.value.field) == ("invalid-request", "idempotencyKey")


@pytest.mark.parametrize("key", ["\x1c", "\u0085", "k"])
def test_a_key_javascript_does_not_trim_is_a_key(make_book: BookFactory, key: str) -> None:
    book = make_book()
    for task_id in TASKS:
        book.create(id=task_id, now_ms=0, ttl_ms=100, max_attempts=1)
    for task_id in TASKS:
        assert book.deliver_result(task_id, key, 1).reason == "not-succeeded"
    with pytest.raises(AsyncBookError) as caught:
        book.deliver_result("nobody", key, 1)
    assert (caught.value.code, caught.value.field) == ("invalid-request", "taskId")


def test_an_attempt_on_the_empty_worker_ends(make_book: BookFactory) -> None:
    book = make_book()
    book.create(id="t", now_ms=0, ttl_ms=100, max_attempts=2)
    book.apply("t", {"type": "start", "atMs": 1, "worker": "w1"})
    book.apply("t", {"type": "fail", "atMs": 2, "error": "oom", "retryable": True})
    book.apply("t", {"type": "start", "atMs": 3, "worker": ""})
    ended = book.apply("t", {"type": "succeed", "atMs": 4, "resultRef": "r", "resultHash": "h"})
    assert (ended.reason, ended.task.state) == ("succeeded", "succeeded")
    assert book.expire("t").reason == "terminal-conflict"


@pytest.mark.parametrize("key", ["k", "t:k", "nobody:k", "celery:nobody:x"])
def test_deliver_checks_in_the_reference_order(make_book: BookFactory, key: str) -> None:
    """The key, then ``nowMs``, then an existing receipt, then the task, then its state."""
    book = make_book()
    book.create(id="t", now_ms=0, ttl_ms=100, max_attempts=1)
    book.apply("t", start())
    book.apply("t", {"type": "succeed", "atMs": 2, "resultRef": "r", "resultHash": "h"})
    with pytest.raises(AsyncBookError) as caught:
        book.deliver_result("nobody", key, 3)
    assert caught.value.field == "taskId"
    assert book.deliver_result("t", key, 3).reason == "delivered"
    with pytest.raises(AsyncBookError) as caught:
        book.deliver_result("nobody", key, -1)
    assert caught.value.field == "nowMs"
    reused = book.deliver_result("nobody", key, 4)
    assert (reused.ok, reused.duplicate, reused.reason) == (
        False,
        True,
        "key-reused-for-other-task",
    )
    again = book.deliver_result("t", key, 5)
    assert (again.reason, again.receipt) == ("duplicate-delivery", reused.receipt)
