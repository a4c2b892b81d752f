"""Heartbeats, stalls and checkpoints (extensions), on every book."""

from __future__ import annotations

import pytest

from asyncbook import AsyncBook, AsyncBookError, FailEvent, sweep

from ..support.events import progress, start, succeed

FAR = 10**15


def running(book: AsyncBook, task_id: str = "h", timeout: int = 50, retry: bool = True) -> int:
    now = book.now_ms()
    book.create(
        id=task_id,
        now_ms=now,
        ttl_ms=FAR,
        max_attempts=2,
        heartbeat_timeout_ms=timeout,
        retry_on_stall=retry,
    )
    book.apply(task_id, start(at=now), f"{task_id}:start")
    return now


def test_a_heartbeat_changes_nothing_a_client_sees(book: AsyncBook) -> None:
    running(book)
    before = book.get("h")
    assert book.heartbeat(["h", "h"]) == 2
    assert book.heartbeat([]) == 0
    assert book.get("h") == before
    assert book.transition_counts().get("started") == 1


def test_a_silent_attempt_stalls_and_is_requeued_when_it_will_be_redelivered(
    book: AsyncBook,
) -> None:
    now = running(book, timeout=50, retry=True)
    assert book.end_stalled(now + 10) == []  # not yet overdue
    (result,) = book.end_stalled(now + 10_000)
    assert not isinstance(result, AsyncBookError)
    assert (result.reason, result.task.state) == ("requeued", "queued")
    event = result.task.history[-1].event
    assert isinstance(event, FailEvent)
    assert event.error.startswith("stalled")
    assert event.retryable
    assert book.end_stalled(now + 20_000) == []  # it stalled once
    # The redelivered execution starts attempt 2 and finishes it.
    again = book.apply("h", start(at=now + 20_001), "h:start:second-execution")
    assert (again.reason, again.task.attempts) == ("started", 2)
    assert book.apply("h", succeed(at=now + 20_002)).reason == "succeeded"


def test_a_stall_without_redelivery_fails_the_task(book: AsyncBook) -> None:
    now = running(book, retry=False)
    (result,) = book.end_stalled(now + 10_000)
    assert not isinstance(result, AsyncBookError)
    assert (result.reason, result.task.state) == ("failed", "failed")
    assert [n.state for n in book.drain_notifications()] == ["failed"]


def test_heartbeats_and_progress_keep_an_attempt_alive(book: AsyncBook) -> None:
    running(book, timeout=60_000)
    book.heartbeat(["h"])
    book.apply("h", progress(10, at=book.now_ms()))
    assert book.end_stalled() == []
    assert sweep(book).stalled == 0


def test_the_sweep_ends_stalled_attempts(book: AsyncBook) -> None:
    now = running(book, timeout=1)
    report = sweep(book, now + 5_000)
    assert report.stalled == 1
    task = book.get("h")
    assert task is not None
    assert task.state == "queued"


def test_tasks_without_a_timeout_never_stall(book: AsyncBook) -> None:
    book.create(id="plain", now_ms=0, ttl_ms=FAR, max_attempts=1)
    book.apply("plain", start(at=1))
    assert book.heartbeat(["plain"]) == 0
    assert book.end_stalled(FAR - 1) == []


def test_an_ended_task_leaves_the_stall_watch(book: AsyncBook) -> None:
    now = running(book, timeout=1)
    book.apply("h", succeed(at=now + 1))
    assert book.end_stalled(now + 10_000) == []


def test_bad_heartbeat_timeout_names_the_field(book: AsyncBook) -> None:
    with pytest.raises(AsyncBookError) as caught:
        book.create(id="x", now_ms=0, ttl_ms=10, max_attempts=1, heartbeat_timeout_ms=0)
    assert caught.value.field == "heartbeatTimeoutMs"
    assert book.get("x") is None


def test_the_last_cursor_is_the_next_attempts_checkpoint(book: AsyncBook) -> None:
    book.create(id="k", now_ms=0, ttl_ms=FAR, max_attempts=3)
    assert book.last_cursor("k") is None
    book.apply("k", start(at=1))
    book.apply("k", progress(10, at=2, cursor="chunk-1"))
    book.apply("k", progress(20, at=3, cursor="chunk-2"))
    book.apply("k", progress(20, at=4, cursor="ignored: a duplicate value"))
    book.apply("k", {"type": "fail", "atMs": 5, "error": "oom", "retryable": True})
    book.apply("k", start(at=6))
    assert book.last_cursor("k") == "chunk-2"
    with pytest.raises(AsyncBookError):
        book.last_cursor("unknown")
