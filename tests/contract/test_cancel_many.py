"""``cancel_many`` on every book (memory, Redis, fakeredis, Cluster, sharded): for each id
what ``cancel`` with the same actor, reason and time answers, with the same task, audit
entry, notifications and group notification; an unknown or bad id answers its error in
its place, the others go on."""

from __future__ import annotations

import json
from typing import Any

from asyncbook import AsyncBook, AsyncBookError, AuditedBook, to_wire

from ..support.books import BookFactory
from ..support.events import start

AT = 500


def _seed(book: AsyncBook, p: str) -> list[Any]:
    """Tasks of every state under prefix ``p``, two of a sealed group; the ids to cancel
    (an unknown one, a bad one, one twice)."""
    for name in ("q", "r", "s", "x"):
        book.create(id=f"{p}{name}", now_ms=0, ttl_ms=1000, max_attempts=1)
    for n in range(2):
        book.create(id=f"{p}m{n}", now_ms=0, ttl_ms=1000, max_attempts=1, group_id=f"{p}g")
    book.seal_group(f"{p}g", 2)
    book.apply(f"{p}r", start(1, "w"))
    book.apply(f"{p}s", start(1, "w"))
    book.apply(f"{p}s", {"type": "succeed", "atMs": 2, "resultRef": "r", "resultHash": "h"})
    book.cancel(f"{p}x", at_ms=3)
    book.cancel(f"{p}m0", at_ms=4)
    return [f"{p}{n}" for n in ("q", "r", "s", "m1", "nope")] + [7, f"{p}q", f"{p}x"]


def _plain(value: Any, p: str) -> Any:
    """An answer as JSON text, the prefix taken out (errors by class, code and field)."""
    if isinstance(value, AsyncBookError):
        value = {"error": type(value).__name__, "code": value.code, "field": value.field}
    elif value is not None and not isinstance(value, list | dict):
        value = to_wire(value)
    return json.loads(json.dumps(value).replace(p, "P"))


def _trail(book: AsyncBook, task_id: Any) -> list[tuple[Any, ...]]:
    assert isinstance(book, AuditedBook)
    return [(e.actor, e.action, e.reason, e.outcome) for e in book.audit(task_id)]


def _many(book: AsyncBook) -> Any:
    """The book's ``cancel_many`` (``MemoryBook``'s, ``RedisBook``'s)."""
    return book.cancel_many  # type: ignore[attr-defined]


def test_cancel_many_is_each_cancel(make_book: BookFactory) -> None:
    book = make_book()
    one_ids, many_ids = _seed(book, "one/"), _seed(book, "many/")
    book.drain_notifications()
    book.drain_group_notifications()
    counts = book.transition_counts()
    one: list[Any] = []
    for task_id in one_ids:
        try:
            one.append(book.cancel(task_id, "stop", at_ms=AT, actor="cli:ann"))
        except AsyncBookError as error:
            one.append(error)
    after_one = book.transition_counts()
    many = _many(book)(many_ids, actor="cli:ann", reason="stop", at_ms=AT)
    after_many = book.transition_counts()
    assert [_plain(r, "many/") for r in many] == [_plain(r, "one/") for r in one]
    assert [getattr(r, "reason", None) for r in many[:5]] == [
        "cancelled", "cancelled", "terminal-conflict", "cancelled", None,
    ]  # fmt: skip
    assert {k: after_many.get(k, 0) - after_one.get(k, 0) for k in after_many} == {
        k: after_one.get(k, 0) - counts.get(k, 0) for k in after_many
    }
    notes = book.drain_notifications()
    mine = [_plain(n, "many/") for n in notes if n.task_id.startswith("many/")]
    assert mine == [_plain(n, "one/") for n in notes if n.task_id.startswith("one/")]
    assert len(mine) == 3
    ended = [n.group_id for n in book.drain_group_notifications()]
    assert sorted(ended) == ["many/g", "one/g"]  # each ended once, by its last member's cancel
    for a, b in zip(many_ids, one_ids, strict=True):
        if isinstance(a, str):
            assert _trail(book, a) == _trail(book, b), a
            assert _plain(book.get(a), "many/") == _plain(book.get(b), "one/")
    assert _trail(book, "many/q") == [
        ("cli:ann", "cancel", "stop", "duplicate-cancel"),
        ("cli:ann", "cancel", "stop", "cancelled"),
    ]


def test_a_bad_reason_is_each_task_s_shape_error(book: AsyncBook) -> None:
    book.create(id="a", now_ms=0, ttl_ms=1000, max_attempts=1)
    answers = _many(book)(["a", "gone"], actor="ops", reason=5, at_ms=1)
    assert [type(a).__name__ for a in answers] == ["AsyncBookError", "UnknownTaskError"]
    assert isinstance(answers[0], AsyncBookError)
    assert answers[0].field == "event.reason"
    assert isinstance(book, AuditedBook)
    assert book.audit() == []
    assert _many(book)([], actor="ops") == []


def test_a_late_cancel_ends_its_group_at_the_cancel_s_time(make_book: BookFactory) -> None:
    """Past the deadline a cancel expires its task; its group ends at the cancel's time
    (the book's clock when none is given), not at the deadline: alone or many at once."""
    book = make_book()
    for p in ("one/", "many/"):
        book.create(id=f"{p}m", now_ms=0, ttl_ms=10, max_attempts=1, group_id=f"{p}g")
        book.seal_group(f"{p}g", 1)
    before = book.now_ms()
    assert book.cancel("one/m", actor="ops").reason == "expired"
    assert [a.reason for a in _many(book)(["many/m"], actor="ops")] == ["expired"]
    notes = book.drain_group_notifications()
    assert sorted(n.group_id for n in notes) == ["many/g", "one/g"]
    assert all(n.at_ms >= before - 1000 for n in notes), notes  # the clock's, not 10
