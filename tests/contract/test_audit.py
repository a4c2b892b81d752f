"""The audit trail, on every book (memory, Redis, fakeredis, Cluster): a cancel that names
its actor is recorded with who, when, why and the answer; the trail stays bounded."""

from __future__ import annotations

import pytest

from asyncbook import AsyncBook, AsyncBookError, AuditedBook, Reason, UnknownTaskError

from ..support.events import start


def audited(book: AsyncBook) -> AuditedBook:
    assert isinstance(book, AuditedBook)
    return book


def test_a_cancel_with_an_actor_is_recorded(book: AsyncBook) -> None:
    book.create(id="a/1", now_ms=book.now_ms(), ttl_ms=600_000, max_attempts=1)
    book.apply("a/1", start(book.now_ms(), "w"))
    before = book.now_ms()
    first = book.cancel("a/1", "customer withdrew", actor="cli:ann")
    again = book.cancel("a/1", actor="token:operator")
    assert (first.reason, again.reason) == (Reason.CANCELLED, Reason.DUPLICATE_CANCEL)
    entries = audited(book).audit("a/1")
    assert [(e.actor, e.action, e.task_id, e.reason, e.outcome) for e in entries] == [
        ("token:operator", "cancel", "a/1", None, "duplicate-cancel"),
        ("cli:ann", "cancel", "a/1", "customer withdrew", "cancelled"),
    ]
    assert all(e.at_ms >= before - 1000 for e in entries)  # the book's clock
    assert audited(book).audit() == entries  # the namespace's log: the same, newest first
    assert audited(book).audit("a/1", limit=1) == entries[:1]
    assert audited(book).audit(since_ms=entries[0].at_ms + 60_000) == []


def test_the_answer_is_the_same_with_or_without_an_actor(book: AsyncBook) -> None:
    for task_id in ("p", "q"):
        book.create(id=task_id, now_ms=0, ttl_ms=1000, max_attempts=1)
    plain = book.cancel("p", "why", at_ms=5)
    audited_one = book.cancel("q", "why", at_ms=5, actor="lib")
    assert plain.model_copy(update={"task": None}) == audited_one.model_copy(update={"task": None})
    assert plain.task is not None
    assert audited_one.task is not None
    assert plain.task.model_copy(update={"id": "q"}) == audited_one.task
    assert audited(book).audit("p") == []  # no actor: not audited


def test_a_refused_cancel_writes_no_entry(book: AsyncBook) -> None:
    with pytest.raises(UnknownTaskError):
        book.cancel("nope", actor="cli:ann")
    book.create(id="c", now_ms=0, ttl_ms=1000, max_attempts=1)
    with pytest.raises(AsyncBookError) as bad:
        book.cancel("c", actor=" ")
    assert bad.value.field == "actor"
    assert audited(book).audit() == []
    stored = book.get("c")
    assert stored is not None
    assert stored.state == "queued"


def test_record_audit_for_a_change_made_elsewhere(book: AsyncBook) -> None:
    book.create(id="r", now_ms=0, ttl_ms=1000, max_attempts=1)
    audited(book).record_audit("r", "retry", "alice", "flaky network", "r-2")
    (entry,) = audited(book).audit("r")
    assert (entry.actor, entry.action, entry.reason, entry.outcome) == (
        "alice",
        "retry",
        "flaky network",
        "r-2",
    )
    with pytest.raises(UnknownTaskError):
        audited(book).record_audit("nope", "retry", "alice", None, "x")
    with pytest.raises(AsyncBookError) as bad:
        audited(book).record_audit("r", "delete", "alice", None, "x")
    assert bad.value.field == "action"
    assert len(audited(book).audit()) == 1


def test_the_trail_is_bounded(book: AsyncBook) -> None:
    book.create(id="b", now_ms=0, ttl_ms=1000, max_attempts=1)
    for n in range(130):
        audited(book).record_audit("b", "retry", f"user-{n}", None, "ok")
    entries = audited(book).audit("b", limit=1000)
    assert len(entries) == 100  # a task keeps its latest 100
    assert entries[0].actor == "user-129"
    assert entries[-1].actor == "user-30"
    with pytest.raises(AsyncBookError) as bad:
        audited(book).audit(limit=1001)
    assert bad.value.field == "limit"
