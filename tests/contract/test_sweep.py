"""The expiry sweep: every overdue task expired once, in batches, however many sweeps run."""

from __future__ import annotations

import threading
from collections import Counter

from asyncbook import AsyncBook, SweepReport, sweep, sweep_health
from asyncbook.redis import ShardedRedisBook

from ..support.books import BookFactory


def fill(book: AsyncBook, count: int, ttl_ms: int = 10) -> list[str]:
    ids = [f"task-{i:05d}" for i in range(count)]
    for task_id in ids:
        book.create(id=task_id, now_ms=0, ttl_ms=ttl_ms, max_attempts=1)
    return ids


def test_sweep_expires_overdue_tasks_in_batches(book: AsyncBook) -> None:
    ids = fill(book, 25)
    book.create(id="later", now_ms=0, ttl_ms=1_000, max_attempts=1)
    report = sweep(book, now_ms=100, batch=10)
    batches = 3  # 25 due tasks, 10 a batch
    if isinstance(book, ShardedRedisBook):  # swept shard by shard: each its own batches
        per_shard = Counter(book.map.index_of(task_id) for task_id in ids)
        batches = sum(-(-count // 10) for count in per_shard.values())
    assert (report.expired, report.batches, report.errors) == (25, batches, 0)
    assert all(book.get(task_id).state == "expired" for task_id in ids)  # type: ignore[union-attr]
    assert book.get("later").state == "queued"  # type: ignore[union-attr]
    notes = book.drain_notifications()
    assert sorted(n.task_id for n in notes) == ids
    assert {n.at_ms for n in notes} == {10}  # the deadline, not the sweeper's clock


def test_nothing_due_is_one_round_trip(book: AsyncBook) -> None:
    fill(book, 3, ttl_ms=1_000)
    assert sweep(book, now_ms=100) == SweepReport(pruned=0)


def test_second_sweep_is_harmless(book: AsyncBook) -> None:
    fill(book, 5)
    assert sweep(book, now_ms=100).expired == 5
    assert sweep(book, now_ms=200).expired == 0
    assert len(book.drain_notifications()) == 5


def test_two_sweeps_at_once_notify_once(make_book: BookFactory) -> None:
    book = make_book()
    ids = fill(book, 300)
    reports: list[SweepReport] = []
    barrier = threading.Barrier(2)

    def run() -> None:
        barrier.wait()
        reports.append(sweep(book, now_ms=100, batch=50))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(report.expired for report in reports) == 300
    notes = book.drain_notifications()
    assert sorted(n.task_id for n in notes) == ids


def test_running_task_is_expired_too(book: AsyncBook) -> None:
    book.create(id="t", now_ms=0, ttl_ms=10, max_attempts=1)
    book.apply("t", {"type": "start", "atMs": 1, "worker": "w"})
    assert sweep(book, now_ms=10).expired == 1
    task = book.get("t")
    assert task is not None
    assert task.state == "expired"


def test_the_book_records_when_a_sweep_last_ran(book: AsyncBook) -> None:
    assert book.last_sweep_ms() is None
    fill(book, 3)
    assert book.overdue_count(100) == 3
    assert book.overdue_count(5) == 0
    sweep(book, now_ms=100)
    assert book.last_sweep_ms() == 100
    assert book.overdue_count(100) == 0
    sweep(book, now_ms=250)
    assert book.last_sweep_ms() == 250


def test_sweep_health_is_bad_while_tasks_wait_and_no_sweep_runs(book: AsyncBook) -> None:
    now = book.now_ms()
    assert sweep_health(book).ok  # nothing overdue: nothing to sweep yet
    book.create(id="late", now_ms=now - 60_000, ttl_ms=1_000, max_attempts=1)
    health = sweep_health(book)
    assert (health.ok, health.stopped, health.overdue, health.last_sweep_ms) == (
        False,
        True,
        1,
        None,
    )
    assert health.problem() == "1 task(s) past their deadline and no sweep ever ran"
    book.record_sweep(now - 40_000)  # a sweep ran, but long ago
    assert sweep_health(book).problem() == "1 task(s) past their deadline and no sweep ran for 40 s"
    sweep(book)
    health = sweep_health(book)
    assert (health.ok, health.stopped, health.overdue) == (True, False, 0)
    wire = health.to_wire()
    assert wire["ok"] is True
    assert wire["overdueTasks"] == 0
    assert 0 <= wire["lastSweepAgeMs"] < 5_000
