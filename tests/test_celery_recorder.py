"""The recorder: buffered events ride with the terminal write; a book that is down is retried."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable

import pytest
import redis

from asyncbook import ApplyItem, AsyncBookError, CallbackResult, MemoryBook
from asyncbook.celery._recorder import Recorder, retrying


class FlakyBook(MemoryBook):
    """A MemoryBook whose ``apply_many`` raises ConnectionError ``failures`` times."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures
        self.batches: list[int] = []
        self.lock = threading.Lock()

    def apply_many(
        self, items: Iterable[ApplyItem], *, full_task: bool = True
    ) -> list[CallbackResult | AsyncBookError]:
        items = list(items)
        with self.lock:
            if self.failures > 0:
                self.failures -= 1
                raise redis.ConnectionError("book down")
            self.batches.append(len(items))
        return super().apply_many(items, full_task=full_task)


def start(task_id: str, at: int = 1) -> ApplyItem:
    return (task_id, {"type": "start", "atMs": at, "worker": "w"}, f"{task_id}:start")


def succeed(task_id: str, at: int = 2) -> ApplyItem:
    event = {"type": "succeed", "atMs": at, "resultRef": "r", "resultHash": "h"}
    return (task_id, event, f"{task_id}:success")


def make(book: MemoryBook, flush_delay: float = 5.0, retry_for: float = 3.0) -> Recorder:
    return Recorder(lambda: book, flush_delay=flush_delay, retry_for=retry_for)


def test_buffered_start_rides_with_the_terminal_write() -> None:
    book = FlakyBook(0)
    book.create(id="t", now_ms=0, ttl_ms=100, max_attempts=1)
    recorder = make(book)
    recorder.buffer(start("t"))
    (result,) = recorder.write(succeed("t"))
    assert result is not None
    assert not isinstance(result, Exception)
    assert result.reason == "succeeded"
    assert book.batches == [2]
    assert recorder.written("t:success")
    recorder.close()


def test_buffer_is_flushed_in_the_background() -> None:
    book = FlakyBook(0)
    book.create(id="t", now_ms=0, ttl_ms=100, max_attempts=1)
    recorder = make(book, flush_delay=0.01)
    recorder.buffer(start("t"))
    deadline = time.monotonic() + 5
    while book.get("t").state != "running":  # type: ignore[union-attr]
        assert time.monotonic() < deadline
        time.sleep(0.01)
    recorder.close()


def test_book_down_briefly_loses_nothing(caplog: pytest.LogCaptureFixture) -> None:
    book = FlakyBook(3)
    book.create(id="t", now_ms=0, ttl_ms=100, max_attempts=1)
    recorder = make(book)
    recorder.buffer(start("t"))
    with caplog.at_level(logging.WARNING, "asyncbook.celery"):
        (result,) = recorder.write(succeed("t"))
    assert result is not None
    assert book.get("t").state == "succeeded"  # type: ignore[union-attr]
    assert "retrying" in caplog.text
    recorder.close()


def test_book_down_too_long_logs_the_task_id(caplog: pytest.LogCaptureFixture) -> None:
    book = FlakyBook(10**6)
    book.create(id="t-lost", now_ms=0, ttl_ms=100, max_attempts=1)
    recorder = make(book, retry_for=0.3)
    with caplog.at_level(logging.ERROR, "asyncbook.celery"):
        assert recorder.write(succeed("t-lost")) == [None]
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert errors
    assert all("t-lost" in r.getMessage() for r in errors)
    book.failures = 0
    recorder.close()


def test_refused_events_are_returned_in_place(caplog: pytest.LogCaptureFixture) -> None:
    book = FlakyBook(0)
    recorder = make(book)
    with caplog.at_level(logging.ERROR, "asyncbook.celery"):
        (result,) = recorder.write(start("unknown"))
    assert isinstance(result, Exception)
    assert "unknown" in caplog.text
    recorder.close()


def test_a_bug_is_logged_not_retried(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[int] = []

    def broken() -> None:
        calls.append(1)
        raise TypeError("bug")

    with caplog.at_level(logging.ERROR, "asyncbook.celery"):
        assert retrying(broken, 5.0, "writing task t-bug") is None
    assert calls == [1]
    assert "t-bug" in caplog.text


def test_retrying_gives_up_after_the_bound() -> None:
    calls: list[float] = []

    def fail() -> None:
        calls.append(time.monotonic())
        raise OSError("down")

    started = time.monotonic()
    assert retrying(fail, 0.3, "x") is None
    assert 0.1 <= time.monotonic() - started <= 1.0
    assert len(calls) >= 2
