"""``RedisBook.cancel_many``: each cancel the one ``cancel`` with an actor makes (answers,
audit entries, notifications, indexes and counts alike), whatever the book knows of the
tasks beforehand, in one cancel_many.lua call per shard (a thousand ids a call)."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from asyncbook import AsyncBookError, CreateSpec, RedisBook
from asyncbook.redis import _expiries

from ..support.books import delete_namespace
from .test_expiries import T0, _fill, _same_writes, _wire, script_calls


def _entries(book: RedisBook, task_id: str) -> list[tuple[Any, ...]]:
    """A task's audit entries, but their time (the server's clock when written)."""
    return [(e.actor, e.action, e.task_id, e.reason, e.outcome) for e in book.audit(task_id)]


@pytest.mark.parametrize("shards", [1, 4])
@pytest.mark.parametrize("reason", ["wrong batch", None, ""])
def test_cancel_many_answers_and_writes_what_cancel_does(
    client: redis.Redis, namespace: str, shards: int, reason: str | None
) -> None:
    twin = f"{namespace}-one-by-one"
    try:
        writer = RedisBook(client, namespace=namespace, shards=shards)
        single = RedisBook(client, namespace=twin, shards=shards)
        ids: list[Any] = [*_fill(writer, 60), "ghost", "t3", 7, "t0"]
        _fill(single, 60)
        for book in (writer, single):  # some ended already, one group sealed
            book.cancel("t1", "early", at_ms=T0 + 20)
            book.seal_group("g0", 3)
        # A fresh book knows no task's facts: it learns them from the script's answers.
        fresh = RedisBook(client, namespace=namespace, shards=shards)
        at = T0 + 30_000
        batched = fresh.cancel_many(ids, actor="token:operator", reason=reason, at_ms=at)
        one_by_one: list[Any] = []
        for task_id in ids:
            try:
                one_by_one.append(single.cancel(task_id, reason, at_ms=at, actor="token:operator"))
            except AsyncBookError as error:
                one_by_one.append(error)
        assert [_wire(r) for r in batched] == [_wire(r) for r in one_by_one]
        assert {getattr(r, "reason", None) for r in batched} >= {"cancelled", "duplicate-cancel"}
        for task_id in {i for i in ids if isinstance(i, str)}:
            assert _entries(writer, task_id) == _entries(single, task_id), task_id
            assert writer.info(task_id) == single.info(task_id)
        _same_writes(writer, single)
    finally:
        delete_namespace(client, twin)


def test_a_bad_actor_cancels_nothing(book: RedisBook) -> None:
    book.create(id="a", now_ms=T0, ttl_ms=60_000, max_attempts=1)
    with pytest.raises(AsyncBookError) as bad:
        book.cancel_many(["a"], actor=" ")
    assert bad.value.field == "actor"
    assert book.get("a").state == "queued"  # type: ignore[union-attr]
    assert book.audit() == []


def test_one_script_call_per_shard(
    client: redis.Redis, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sharded: the ids grouped by shard, each shard's in one call; past ``CHUNK`` ids of
    a shard, one call per thousand."""
    book = RedisBook(client, namespace=namespace, shards=4)
    count = 2 * _expiries.CHUNK + 5
    for at in range(0, count, 500):
        book.create_many(
            [CreateSpec(f"t{n}", T0, 60_000, 1) for n in range(at, min(count, at + 500))]
        )
    few = [f"t{n}" for n in range(40)]
    assert len({book.ns.index_of(task_id) for task_id in few}) == 4
    calls = script_calls(monkeypatch)
    results = book.cancel_many(few, actor="cli:ann", reason="stop", at_ms=T0 + 1)
    assert [getattr(r, "reason", r) for r in results] == ["cancelled"] * len(few)
    assert len(calls) == 4
    calls.clear()
    rest = [f"t{n}" for n in range(40, count)]
    per_shard = [sum(1 for i in rest if book.ns.index_of(i) == s) for s in range(4)]
    results = book.cancel_many(rest, actor="cli:ann", at_ms=T0 + 2)
    assert [getattr(r, "reason", r) for r in results] == ["cancelled"] * len(rest)
    assert len(calls) == sum(-(-n // _expiries.CHUNK) for n in per_shard)
    assert len(book.audit(limit=1000)) == 1000  # each cancel audited
