"""Groups (extension): members counted by the same calls that change them, on every book."""

from __future__ import annotations

import pytest

from asyncbook import AsyncBook, AsyncBookError

from ..support.events import fail, progress, start, succeed

FAR = 10**15


def members(book: AsyncBook, group: str, count: int) -> list[str]:
    ids = [f"{group}-{n}" for n in range(count)]
    for task_id in ids:
        book.create(id=task_id, now_ms=0, ttl_ms=FAR, max_attempts=2, group_id=group)
    return ids


def test_counts_and_progress_follow_the_members(book: AsyncBook) -> None:
    a, b, c, d = members(book, "g", 4)
    book.apply(a, start())
    book.apply(a, progress(50))
    book.apply(b, start())
    book.apply(b, succeed())
    book.cancel(c, at_ms=5)
    summary = book.group("g")
    assert summary is not None
    assert (summary.members, summary.total, summary.ended) == (4, None, False)
    assert summary.counts == {
        "queued": 1,
        "running": 1,
        "succeeded": 1,
        "failed": 0,
        "expired": 0,
        "cancelled": 1,
    }
    assert summary.progress == 37.5  # (50 + 100 + 0 + 0) / 4
    assert [t.id for t in book.group_members("g")] == [a, b, c, d]
    assert all(t.history == () for t in book.group_members("g"))
    assert book.group("nobody") is None


def test_one_group_notification_when_the_last_declared_member_ends(book: AsyncBook) -> None:
    ids = members(book, "h", 3)
    book.seal_group("h", 3)
    for task_id in ids[:2]:
        book.apply(task_id, start())
        book.apply(task_id, succeed())
    assert book.drain_group_notifications() == []
    book.apply(ids[2], start())
    book.apply(ids[2], {"type": "fail", "atMs": 9, "error": "x", "retryable": True})  # requeued
    assert book.drain_group_notifications() == []
    book.apply(ids[2], start(at=10))
    book.apply(ids[2], fail(at=11))
    (note,) = book.drain_group_notifications()
    assert (note.group_id, note.total, note.at_ms) == ("h", 3, 11)
    assert note.counts == {"succeeded": 2, "failed": 1, "expired": 0, "cancelled": 0}
    book.expire(ids[2])  # terminal already: nothing more
    assert book.drain_group_notifications() == []
    summary = book.group("h")
    assert summary is not None
    assert summary.ended


def test_sealing_after_every_member_ended_notifies_at_once(book: AsyncBook) -> None:
    (only,) = members(book, "late-seal", 1)
    book.expire(only)
    assert book.drain_group_notifications() == []
    summary = book.seal_group("late-seal", 1)
    assert summary.ended
    (note,) = book.drain_group_notifications()
    assert note.counts["expired"] == 1


def test_bad_group_input_names_the_field(book: AsyncBook) -> None:
    with pytest.raises(AsyncBookError) as caught:
        book.create(id="x", now_ms=0, ttl_ms=10, max_attempts=1, group_id=" ")
    assert caught.value.field == "groupId"
    assert book.get("x") is None
    with pytest.raises(AsyncBookError) as caught:
        book.seal_group("g", 0)
    assert caught.value.field == "total"
