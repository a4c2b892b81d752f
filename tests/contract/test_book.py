"""The book contract, written once and run against every book (see conftest.BOOK_KINDS)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from asyncbook import AsyncBook, AsyncBookError, UnknownTaskError, to_wire

from ..support.books import BookFactory
from ..support.events import expire, fail, progress, start, succeed


def create(book: AsyncBook, task_id: str = "t1", **kwargs: Any) -> None:
    params: dict[str, Any] = {"now_ms": 0, "ttl_ms": 1000, "max_attempts": 2, **kwargs}
    book.create(id=task_id, **params)


def finish(book: AsyncBook, task_id: str = "t1", digest: str = "h1") -> None:
    book.apply(task_id, start())
    book.apply(task_id, succeed(digest=digest, ref=f"ref-{task_id}"))


class TestCreate:
    def test_create_and_get(self, book: AsyncBook) -> None:
        task = book.create(id="t1", now_ms=5, ttl_ms=10, max_attempts=1)
        assert book.get("t1") == task
        assert to_wire(task)["expiresAtMs"] == 15
        assert book.get("nope") is None

    def test_existing_id_is_conflict(self, book: AsyncBook) -> None:
        create(book)
        book.apply("t1", start())
        with pytest.raises(AsyncBookError) as caught:
            create(book)
        assert caught.value.code == "conflict"
        assert book.get("t1").version == 1  # type: ignore[union-attr]

    def test_exist_ok_returns_stored_task_unchanged(self, book: AsyncBook) -> None:
        create(book)
        stored = book.apply("t1", start()).task
        again = book.create(id="t1", now_ms=500, ttl_ms=1, max_attempts=9, exist_ok=True)
        assert again == stored

    def test_inputs_validated_before_conflict(self, book: AsyncBook) -> None:
        create(book)
        with pytest.raises(AsyncBookError) as caught:
            book.create(id="t1", now_ms=0, ttl_ms=0, max_attempts=1, exist_ok=True)
        assert caught.value.code == "invalid-request"
        assert "ttlMs" in str(caught.value)

    def test_bad_create_stores_nothing(self, book: AsyncBook) -> None:
        with pytest.raises(AsyncBookError):
            book.create(id="x", now_ms=-1, ttl_ms=1, max_attempts=1)
        assert book.get("x") is None


class TestApply:
    def test_unknown_task(self, book: AsyncBook) -> None:
        with pytest.raises(UnknownTaskError) as caught:
            book.apply("ghost", start(), "cb")
        assert (caught.value.code, caught.value.field) == ("invalid-request", "taskId")

    def test_unknown_task_checked_before_event_shape(self, book: AsyncBook) -> None:
        with pytest.raises(UnknownTaskError):
            book.apply("ghost", {"type": "bogus"})

    def test_applies_and_stores(self, book: AsyncBook) -> None:
        create(book)
        result = book.apply("t1", start(), "cb-1")
        assert (result.reason, result.changed, result.duplicate_callback) == (
            "started",
            True,
            False,
        )
        assert book.get("t1") == result.task

    def test_duplicate_callback(self, book: AsyncBook) -> None:
        create(book)
        first = book.apply("t1", start(), "cb-1")
        again = book.apply("t1", start(at=7, worker="other"), "cb-1")
        assert (again.reason, again.duplicate, again.duplicate_callback) == (
            "duplicate-callback",
            True,
            True,
        )
        assert (again.changed, again.notify) == (False, False)
        assert again.task == first.task

    def test_duplicate_callback_wins_over_invalid_event(self, book: AsyncBook) -> None:
        create(book)
        book.apply("t1", start(), "cb-1")
        result = book.apply("t1", {"type": "progress", "atMs": -5, "progress": 1000}, "cb-1")
        assert result.reason == "duplicate-callback"
        result = book.apply("t1", {"nonsense": True}, "cb-1")
        assert result.reason == "duplicate-callback"

    def test_callback_ids_are_global(self, book: AsyncBook) -> None:
        create(book, "a")
        create(book, "b")
        book.apply("a", start(), "shared")
        result = book.apply("b", start(), "shared")
        assert result.reason == "duplicate-callback"
        assert book.get("b").state == "queued"  # type: ignore[union-attr]

    def test_unchanged_result_records_callback(self, book: AsyncBook) -> None:
        create(book)
        assert book.apply("t1", succeed(), "cb-early").reason == "not-running"
        book.apply("t1", start())
        assert book.apply("t1", succeed(), "cb-early").reason == "duplicate-callback"

    def test_rejected_event_records_nothing(self, book: AsyncBook) -> None:
        create(book)
        book.apply("t1", start())
        with pytest.raises(AsyncBookError):
            book.apply("t1", progress(101), "cb-bad")
        assert book.get("t1").version == 1  # type: ignore[union-attr]
        assert book.apply("t1", progress(50), "cb-bad").reason == "progress"

    @pytest.mark.parametrize(
        ("event", "field"),
        [
            ({"type": "start", "atMs": "5", "worker": "w"}, "atMs"),
            ({"type": "start", "atMs": True, "worker": "w"}, "atMs"),
            ({"type": "start", "at_ms": 5, "worker": "w"}, "atMs"),
            ({"type": "fail", "atMs": 5, "error": "e", "retryable": "yes"}, "retryable"),
            ({"type": "launch", "atMs": 5}, "type"),
            ({"atMs": 5}, "type"),
            ({"type": "progress", "atMs": 5, "progress": 200, "cursor": ""}, "progress"),
            ({"type": "succeed", "atMs": 5, "resultRef": " ", "resultHash": "h"}, "resultRef"),
        ],
    )
    def test_bad_event_names_field(
        self, book: AsyncBook, event: dict[str, Any], field: str
    ) -> None:
        create(book)
        book.apply("t1", start())
        before = book.get("t1")
        with pytest.raises(AsyncBookError) as caught:
            book.apply("t1", event, "cb")
        assert caught.value.code == "invalid-request"
        assert field in str(caught.value)
        assert book.get("t1") == before

    def test_wire_events_with_unknown_keys(self, book: AsyncBook) -> None:
        create(book)
        result = book.apply("t1", {"type": "start", "atMs": 1, "worker": "w", "extra": [1]})
        assert to_wire(result.task.history[0].event) == {"type": "start", "atMs": 1, "worker": "w"}


class TestNotifications:
    def test_one_notification_per_terminal_state(self, book: AsyncBook) -> None:
        create(book)
        book.apply("t1", start(at=1))
        book.apply("t1", succeed(at=9, digest="h"))
        book.apply("t1", succeed(at=10, digest="h"))
        book.apply("t1", expire(at=11))
        assert [to_wire(n) for n in book.drain_notifications()] == [
            {"taskId": "t1", "state": "succeeded", "atMs": 9}
        ]
        assert book.drain_notifications() == []

    def test_no_notification_for_requeue(self, book: AsyncBook) -> None:
        create(book)
        book.apply("t1", start())
        book.apply("t1", fail(retryable=True))
        assert book.drain_notifications() == []

    def test_late_success_notifies_at_its_own_time(self, book: AsyncBook) -> None:
        create(book, ttl_ms=100)
        book.apply("t1", start(at=1))
        book.apply("t1", succeed(at=150))
        [note] = book.drain_notifications()
        assert (note.state, note.at_ms) == ("expired", 150)

    def test_drain_order_utf16_then_time(self, book: AsyncBook) -> None:
        # U+FF61 sorts after U+1F600 by code point but before it by UTF-16 code unit.
        ids = ["b", "\U0001f600", "\uff61", "a"]
        for task_id in ids:
            create(book, task_id, ttl_ms=100)
        book.apply("b", expire(at=7))
        book.apply("\U0001f600", start())
        book.apply("\U0001f600", fail(at=4))
        book.apply("\uff61", expire(at=1))
        book.apply("a", start())
        book.apply("a", succeed(at=5))
        order = [(n.task_id, n.at_ms) for n in book.drain_notifications()]
        assert order == [("a", 5), ("b", 7), ("\U0001f600", 4), ("\uff61", 1)]


class TestExpire:
    def test_expire_is_at_deadline(self, book: AsyncBook) -> None:
        create(book, now_ms=10, ttl_ms=90)
        result = book.expire("t1")
        assert (result.reason, result.notify) == ("expired", True)
        assert to_wire(result.task.history[-1].event) == {"type": "expire", "atMs": 100}
        [note] = book.drain_notifications()
        assert (note.state, note.at_ms) == ("expired", 100)

    def test_expire_twice(self, book: AsyncBook) -> None:
        create(book)
        book.expire("t1")
        assert book.expire("t1").reason == "duplicate-expire"
        assert len(book.drain_notifications()) == 1

    def test_expire_finished_task(self, book: AsyncBook) -> None:
        create(book)
        finish(book)
        assert book.expire("t1").reason == "terminal-conflict"

    def test_expire_unknown(self, book: AsyncBook) -> None:
        with pytest.raises(UnknownTaskError):
            book.expire("ghost")


class TestResume:
    def grow(self, book: AsyncBook, versions: int) -> None:
        create(book, max_attempts=1)
        book.apply("t1", start())
        for value in range(1, versions):
            book.apply("t1", progress(value))

    def test_caught_up(self, book: AsyncBook) -> None:
        self.grow(book, 3)
        for cursor in (3, 4, 100):
            result = book.resume("t1", cursor)
            assert (result.mode, result.events) == ("caught-up", ())
            assert result.task.version == 3

    def test_delta(self, book: AsyncBook) -> None:
        self.grow(book, 5)
        result = book.resume("t1", 2)
        assert result.mode == "delta"
        assert [entry.version for entry in result.events] == [3, 4, 5]

    def test_retention_edge(self, make_book: BookFactory) -> None:
        book = make_book(retention_versions=3)
        self.grow(book, 10)
        assert book.resume("t1", 7).mode == "delta"
        assert len(book.resume("t1", 7).events) == 3
        result = book.resume("t1", 6)
        assert (result.mode, result.events) == ("snapshot", ())
        assert result.task.version == 10

    def test_default_retention_is_8(self, book: AsyncBook) -> None:
        self.grow(book, 9)
        assert book.resume("t1", 1).mode == "delta"
        assert book.resume("t1", 0).mode == "snapshot"

    def test_unknown_task_checked_before_cursor(self, book: AsyncBook) -> None:
        with pytest.raises(UnknownTaskError):
            book.resume("ghost", -1)

    @pytest.mark.parametrize("cursor", [-1, 1.5, math.nan, "1", True, None])
    def test_bad_cursor(self, book: AsyncBook, cursor: Any) -> None:
        create(book)
        with pytest.raises(AsyncBookError) as caught:
            book.resume("t1", cursor)
        assert "cursorVersion" in str(caught.value)

    def test_integral_float_cursor(self, book: AsyncBook) -> None:
        self.grow(book, 3)
        assert book.resume("t1", 2.0).mode == "delta"  # type: ignore[arg-type]


class TestDelivery:
    def test_deliver(self, book: AsyncBook) -> None:
        create(book)
        finish(book)
        result = book.deliver_result("t1", "key-1", 50)
        assert (result.ok, result.duplicate, result.reason) == (True, False, "delivered")
        assert result.receipt is not None
        assert to_wire(result.receipt) == {
            "taskId": "t1",
            "resultRef": "ref-t1",
            "resultHash": "h1",
            "idempotencyKey": "key-1",
            "deliveredAtMs": 50,
        }

    def test_same_key_same_receipt(self, book: AsyncBook) -> None:
        create(book)
        finish(book)
        first = book.deliver_result("t1", "key-1", 50)
        again = book.deliver_result("t1", "key-1", 99)
        assert (again.ok, again.duplicate, again.reason) == (True, True, "duplicate-delivery")
        assert again.receipt == first.receipt

    def test_key_reused_for_other_task_returns_that_receipt(self, book: AsyncBook) -> None:
        create(book, "a")
        create(book, "b")
        finish(book, "a")
        finish(book, "b")
        first = book.deliver_result("a", "key", 5)
        other = book.deliver_result("b", "key", 6)
        assert (other.ok, other.duplicate, other.reason) == (
            False,
            True,
            "key-reused-for-other-task",
        )
        assert other.receipt == first.receipt

    def test_key_checked_before_task_exists(self, book: AsyncBook) -> None:
        create(book, "a")
        finish(book, "a")
        book.deliver_result("a", "key", 5)
        assert book.deliver_result("ghost", "key", 6).reason == "key-reused-for-other-task"
        with pytest.raises(UnknownTaskError):
            book.deliver_result("ghost", "fresh-key", 6)

    def test_not_succeeded(self, book: AsyncBook) -> None:
        create(book)
        result = book.deliver_result("t1", "key", 5)
        assert (result.ok, result.duplicate, result.reason, result.receipt) == (
            False,
            False,
            "not-succeeded",
            None,
        )
        finish(book)
        assert book.deliver_result("t1", "key", 6).reason == "delivered"

    @pytest.mark.parametrize(
        ("key", "now"), [("", 1), (" \t", 1), ("\ufeff", 1), (5, 1), ("k", -1), ("k", math.inf)]
    )
    def test_bad_input(self, book: AsyncBook, key: Any, now: Any) -> None:
        with pytest.raises(AsyncBookError) as caught:
            book.deliver_result("ghost", key, now)
        assert caught.value.code == "invalid-request"
        assert not isinstance(caught.value, UnknownTaskError)


def test_full_life_json(book: AsyncBook) -> None:
    """One life, compared with the reference's JSON shape."""
    book.create(id="job", now_ms=0, ttl_ms=10_000, max_attempts=2)
    book.apply("job", start(at=1, worker="w1"), "c1")
    book.apply("job", progress(40, at=2, cursor="chunk-4"), "c2")
    book.apply("job", fail(at=3, error="gpu lost", retryable=True), "c3")
    book.apply("job", start(at=4, worker="w2"), "c4")
    book.apply("job", succeed(at=5, ref="s3://out/job", digest="abc"), "c5")
    book.apply("job", succeed(at=5, ref="s3://out/job", digest="abc"), "c5")
    assert to_wire(book.get("job")) == {  # type: ignore[arg-type]
        "id": "job",
        "state": "succeeded",
        "expiresAtMs": 10000,
        "attempts": 2,
        "maxAttempts": 2,
        "progress": 100,
        "version": 5,
        "resultRef": "s3://out/job",
        "resultHash": "abc",
        "error": "gpu lost",
        "history": [
            {"version": 1, "event": {"type": "start", "atMs": 1, "worker": "w1"}},
            {
                "version": 2,
                "event": {"type": "progress", "atMs": 2, "progress": 40, "cursor": "chunk-4"},
            },
            {
                "version": 3,
                "event": {"type": "fail", "atMs": 3, "error": "gpu lost", "retryable": True},
            },
            {"version": 4, "event": {"type": "start", "atMs": 4, "worker": "w2"}},
            {
                "version": 5,
                "event": {
                    "type": "succeed",
                    "atMs": 5,
                    "resultRef": "s3://out/job",
                    "resultHash": "abc",
                },
            },
        ],
    }
