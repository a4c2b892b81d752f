"""``RedisBook.expire_many``: a thousand expiries per expire_many.lua call, each the one
``expire`` makes (answers, notifications, indexes and counts alike), whatever the book
knows of the tasks beforehand."""

from __future__ import annotations

import sys
import time
from datetime import timedelta
from typing import Any

import pytest
import redis

from asyncbook import (
    AsyncBookError,
    CreateSpec,
    PublishInfo,
    RedisBook,
    StartEvent,
    sweep,
    to_wire,
)
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
    if isinstance(result, AsyncBookError):
        return type(result).__name__
    return result if isinstance(result, bool) else to_wire(result)


def _changed(book: RedisBook, ids: list[str]) -> list[Any]:
    """The sweep's expiries (``ShardDue.expire_counted``) of a book of one shard: whether
    each changed its task, or its error."""
    (answers,) = book.each_shard(lambda part: part.expire_counted(ids))
    return [a if isinstance(a, AsyncBookError) else a.changed for a in answers]


@pytest.mark.parametrize("full_task", [True, False, None], ids=["full", "bare", "changed"])
def test_expire_many_answers_and_writes_what_expire_does(
    client: redis.Redis, namespace: str, full_task: bool | None
) -> None:
    """(None: the sweep's expiries, which answer only whether each changed its task.)"""
    twin = f"{namespace}-one-by-one"
    try:
        writer, single = RedisBook(client, namespace=namespace), RedisBook(client, namespace=twin)
        ids = [*_fill(writer, 60), "ghost", "t3"]
        _fill(single, 60)
        # A fresh book knows no task's facts: it learns them from the script's answers.
        fresh = RedisBook(client, namespace=namespace)
        batched = (
            _changed(fresh, ids)
            if full_task is None
            else fresh.expire_many(ids, full_task=full_task)
        )
        one_by_one: list[Any] = []
        for task_id in ids:
            try:
                one_by_one.append(single.expire(task_id))
            except AsyncBookError as error:
                one_by_one.append(error)
        if full_task is None:
            one_by_one = [r if isinstance(r, AsyncBookError) else r.changed for r in one_by_one]
        elif not full_task:
            one_by_one = [
                r
                if isinstance(r, AsyncBookError)
                else r.model_copy(update={"task": r.task.model_copy(update={"history": ()})})
                for r in one_by_one
            ]
        assert [_wire(r) for r in batched] == [_wire(r) for r in one_by_one]
        _same_writes(writer, single)
    finally:
        delete_namespace(client, twin)


def _same_writes(a: RedisBook, b: RedisBook) -> None:
    """What expiring wrote to ``a`` is what it wrote to ``b``."""
    assert a.drain_notifications() == b.drain_notifications()
    assert [n.group_id for n in a.drain_group_notifications()] == [
        n.group_id for n in b.drain_group_notifications()
    ]
    assert list(a.transition_counts().items()) == list(b.transition_counts().items())
    assert a.overdue(T0 + 10**9) == b.overdue(T0 + 10**9)
    assert a.count_by_state() == b.count_by_state()
    assert a.name_totals() == b.name_totals()
    assert a.search(limit=100).totals == b.search(limit=100).totals


def test_the_sweep_writes_what_expire_does(client: redis.Redis, namespace: str) -> None:
    """The sweep's overlapped calls (``_expiries.overlapped``) from a book that knows no
    task's facts, batches of 7: the writes of expiring each due task one by one."""
    twin = f"{namespace}-one-by-one"
    try:
        writer, single = RedisBook(client, namespace=namespace), RedisBook(client, namespace=twin)
        ids = [*_fill(writer, 60), "odd{%}"]  # an id its keys spell escaped
        _fill(single, 60)
        for book in (writer, single):
            book.create(id="odd{%}", now_ms=T0, ttl_ms=70_000, max_attempts=1)
        due = single.overdue(T0 + 10**9, limit=100)
        report = sweep(RedisBook(client, namespace=namespace), T0 + 10**9, batch=7)
        assert (report.expired, report.batches, report.errors) == (61, 9, 0)
        assert sorted(due) == sorted(ids)
        assert all(single.expire(task_id).changed for task_id in due)
        _same_writes(writer, single)
    finally:
        delete_namespace(client, twin)


def _due(book: RedisBook, count: int) -> list[str]:
    ids = [f"t{n:05d}" for n in range(count)]
    for at in range(0, count, 500):
        book.create_many([CreateSpec(task_id, T0, 1, 1) for task_id in ids[at : at + 500]])
    return ids


def _logged(monkeypatch: pytest.MonkeyPatch, log: list[str]) -> None:
    """``log`` gets "call" for each expire_many.lua call made, "read" for each read."""
    make, read = _expiries.expire_call, _expiries.read_chunk

    def expire_call(*args: Any) -> Any:
        log.append("call")
        return make(*args)

    def read_chunk(*args: Any) -> Any:
        log.append("read")
        return read(*args)

    monkeypatch.setattr(_expiries, "expire_call", expire_call)
    monkeypatch.setattr(_expiries, "read_chunk", read_chunk)


def test_the_sweep_sends_each_call_before_it_reads_the_last(
    book: RedisBook, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis runs a batch while the client reads the one before: the next call is sent
    first. The batches are disjoint; every due task expires and notifies once."""
    ids = _due(book, 2500)
    log: list[str] = []
    _logged(monkeypatch, log)
    report = sweep(book, T0 + 10, batch=1000)
    assert (report.expired, report.batches, report.errors) == (2500, 3, 0)
    assert log == ["call", "call", "call", "read", "read", "read"]
    assert sorted(n.task_id for n in book.drain_notifications()) == ids


def test_the_sweep_loads_the_library_its_calls_missed(client: redis.Redis, book: RedisBook) -> None:
    """Calls in flight that meet no library (FUNCTION FLUSH) each run as alone: the
    library loaded, nothing expired twice."""
    ids = _due(book, 2500)
    book.get("t00000")  # the library loaded, then lost
    client.function_flush()
    report = sweep(book, T0 + 10, batch=1000)
    assert (report.expired, report.batches, report.errors) == (2500, 3, 0)
    assert sorted(n.task_id for n in book.drain_notifications()) == ids


def test_a_lost_connection_leaves_the_rest_to_batch_by_batch(
    book: RedisBook, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection fails with calls in flight: the rest goes batch by batch; every
    due task expires and notifies once."""
    ids = _due(book, 3500)
    read_chunk, real_read = _expiries.read_chunk, redis.connection.Connection.read_response
    broken: list[bool] = []

    def read_once(*args: Any) -> Any:
        broken.append(not broken)  # the reply after the first batch's answers fails
        return read_chunk(*args)

    def read_response(self: Any, *args: Any, **kwargs: Any) -> Any:
        if broken == [True]:
            broken.append(False)
            raise redis.ConnectionError("lost")
        return real_read(self, *args, **kwargs)

    monkeypatch.setattr(_expiries, "read_chunk", read_once)
    monkeypatch.setattr(redis.connection.Connection, "read_response", read_response)
    report = sweep(book, T0 + 10, batch=1000)
    # The calls in flight ran, or run while the rest goes: their tasks are not counted,
    # and a batch met after they ran changes nothing and stops the sweep; the next goes on.
    assert report.errors == 0
    assert 1000 <= report.expired <= 3500
    assert sweep(book, T0 + 10, batch=1000).errors == 0
    assert not book.overdue(T0 + 10)
    assert sorted(n.task_id for n in book.drain_notifications()) == ids


def test_no_connection_for_the_overlapped_calls_leaves_them_to_batch_by_batch(
    book: RedisBook, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool gives no connection (Redis went away just then): the sweep goes batch by
    batch, through the driver, which reports an outage as such."""
    ids = _due(book, 1500)
    pool: Any = book.client.connection_pool
    real_get = pool.get_connection
    refused: list[int] = []

    def get_connection(*args: Any, **kwargs: Any) -> Any:
        if not refused and sys._getframe(1).f_code.co_name == "overlapped":
            refused.append(1)
            raise redis.ConnectionError("refused")
        return real_get(*args, **kwargs)

    monkeypatch.setattr(pool, "get_connection", get_connection)
    assert sweep(book, T0 + 10, batch=1000).expired == 1500
    assert refused == [1]
    assert sorted(n.task_id for n in book.drain_notifications()) == ids


def test_an_observed_client_sweeps_batch_by_batch(
    book: RedisBook, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client whose dispatch is wrapped (an instrumentation, a spy) sees every call:
    no call is sent before the last one's answer is read."""
    client: Any = book.client
    monkeypatch.setattr(client, "execute_command", client.execute_command)
    _due(book, 2500)
    log: list[str] = []
    _logged(monkeypatch, log)
    assert sweep(book, T0 + 10, batch=1000).expired == 2500
    assert log == ["call", "read"] * 3


@pytest.mark.parametrize("pending", [True, False])
def test_the_outbox_is_trimmed_as_one_by_one_around_its_consumer_groups(
    client: redis.Redis, namespace: str, pending: bool
) -> None:
    """A batch trims the outbox once, after its last task (``write_later``): what expiring
    the tasks one by one trims (up to a group's first pending entry, else the entry after
    the last one it acknowledged)."""
    twin = f"{namespace}-one-by-one"
    try:
        kept: list[list[Any]] = []
        for name in (namespace, twin):
            book = RedisBook(client, namespace=name, retention=timedelta(milliseconds=1))
            book.create_many([CreateSpec(f"t{n:02d}", T0, 1, 1) for n in range(30)])
            for group in ("late", "done"):  # made before the entries: they read them all
                assert book.consume_notifications(group, "c") == []
            for n in range(10):
                book.expire(f"t{n:02d}")
            read = book.consume_notifications("late", "c", count=6)
            book.ack("late", *[entry for entry, _note in read[: 2 if pending else 6]])
            done = book.consume_notifications("done", "c", count=10)
            book.ack("done", *[entry for entry, _note in done])
            time.sleep(0.01)  # the entries above are older than the retention now
            ids = [f"t{n:02d}" for n in range(10, 30)]
            if name == namespace:
                assert _changed(book, ids) == [True] * 20
            else:
                assert all(book.expire(task_id).changed for task_id in ids)
            entries: Any = client.xrange(book.keys.outbox)
            kept.append([fields[b"taskId"] for _entry, fields in entries])
        assert kept[0] == kept[1]
        assert kept[0][0] == (b"t02" if pending else b"t06")
    finally:
        delete_namespace(client, twin)


def script_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The script calls made from now on (one item each): EVALSHA, or FCALL to the
    library, alone or in a pipeline."""
    calls: list[int] = []
    real_execute = redis.client.Pipeline.execute

    def counted(method: str) -> Any:
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
    return calls


def test_a_thousand_expiries_per_script_call(
    book: RedisBook, monkeypatch: pytest.MonkeyPatch
) -> None:
    count = 2 * _expiries.CHUNK + 5
    for at in range(0, count, 500):
        book.create_many([CreateSpec(f"t{n}", T0, 1, 1) for n in range(at, min(count, at + 500))])
    calls = script_calls(monkeypatch)
    results = book.expire_many([f"t{n}" for n in range(count)], full_task=False)
    assert [getattr(r, "reason", r) for r in results] == ["expired"] * count
    assert len(calls) == 3
