"""``RedisBook.expire_many``: a thousand expiries per expire_many.lua call, each the one
``expire`` makes (answers, notifications, indexes and counts alike), whatever the book
knows of the tasks beforehand."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from asyncbook import AsyncBookError, CreateSpec, PublishInfo, RedisBook, StartEvent, to_wire
from asyncbook.redis import _expiries

from ..support.books import delete_namespace

T0 = 1_700_000_000_000


def _fill(book: RedisBook, count: int) -> list[str]:
    """Tasks of every shape: named or not, in a group or not, queued or running."""
    ids = []
    for n in range(count):
        task_id = f"t{n}"
        info = PublishInfo(name=f"job.{n % 3}") if n % 2 else None
        group = f"g{n % 4}" if n % 5 == 0 else None
        book.create(
            id=task_id, now_ms=T0 + n, ttl_ms=60_000 + n % 7, max_attempts=2,
            info=info, group_id=group,
        )  # fmt: skip
        if n % 3 == 0:
            book.apply(task_id, StartEvent(at_ms=T0 + 10 + n, worker=f"w{n % 2}"))
        ids.append(task_id)
    return ids


def _wire(result: Any) -> Any:
    return type(result).__name__ if isinstance(result, AsyncBookError) else to_wire(result)


@pytest.mark.parametrize("full_task", [True, False])
def test_expire_many_answers_and_writes_what_expire_does(
    client: redis.Redis, namespace: str, full_task: bool
) -> None:
    twin = f"{namespace}-one-by-one"
    try:
        writer, single = RedisBook(client, namespace=namespace), RedisBook(client, namespace=twin)
        ids = [*_fill(writer, 60), "ghost", "t3"]
        _fill(single, 60)
        # A fresh book knows no task's facts: it learns them from the script's answers.
        batched = RedisBook(client, namespace=namespace).expire_many(ids, full_task=full_task)
        one_by_one: list[Any] = []
        for task_id in ids:
            try:
                one_by_one.append(single.expire(task_id))
            except AsyncBookError as error:
                one_by_one.append(error)
        if not full_task:
            one_by_one = [
                r
                if isinstance(r, AsyncBookError)
                else r.model_copy(update={"task": r.task.model_copy(update={"history": ()})})
                for r in one_by_one
            ]
        assert [_wire(r) for r in batched] == [_wire(r) for r in one_by_one]
        a, b = writer, single
        assert a.drain_notifications() == b.drain_notifications()
        assert [n.group_id for n in a.drain_group_notifications()] == [
            n.group_id for n in b.drain_group_notifications()
        ]
        assert a.transition_counts() == b.transition_counts()
        assert a.count_by_state() == b.count_by_state()
        assert a.name_totals() == b.name_totals()
        assert a.search(limit=100).totals == b.search(limit=100).totals
    finally:
        delete_namespace(client, twin)


def test_a_thousand_expiries_per_script_call(
    book: RedisBook, monkeypatch: pytest.MonkeyPatch
) -> None:
    count = 2 * _expiries.CHUNK + 5
    for at in range(0, count, 500):
        book.create_many([CreateSpec(f"t{n}", T0, 1, 1) for n in range(at, min(count, at + 500))])
    calls: list[int] = []
    real_execute = redis.client.Pipeline.execute

    def counted(method: str) -> Any:  # a script call: EVALSHA, or FCALL to the library
        real = getattr(redis.Redis, method)

        def call(self: Any, *args: Any) -> Any:
            calls.append(1)
            return real(self, *args)

        return call

    def execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        scripts = ("EVALSHA", "FCALL")
        calls.extend(1 for command in self.command_stack if command[0][0] in scripts)
        return real_execute(self, *args, **kwargs)

    for method in ("evalsha", "fcall"):
        monkeypatch.setattr(redis.Redis, method, counted(method))
    monkeypatch.setattr(redis.client.Pipeline, "execute", execute)
    results = book.expire_many([f"t{n}" for n in range(count)], full_task=False)
    assert [getattr(r, "reason", r) for r in results] == ["expired"] * count
    assert len(calls) == 3
