"""The recorder: buffered events ride with the terminal write; a book that is down is retried."""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable

import pytest
import redis

from asyncbook import ApplyItem, AsyncBookError, CallbackResult, MemoryBook
from asyncbook.celery._recorder import Recorder
from asyncbook.celery._retrying import retrying


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


def test_an_event_that_may_ride_waits_its_own_delay() -> None:
    """Events that may ride with a result (asyncbook's backend takes them) are not sent
    with an earlier batch; other events are, with the first batch due."""
    book = FlakyBook(0)
    for task_id in ("a", "b", "c"):
        book.create(id=task_id, now_ms=0, ttl_ms=10_000, max_attempts=1)
    recorder = make(book, flush_delay=0.4)
    recorder.buffer(start("a"), rides=True)
    time.sleep(0.3)
    recorder.buffer(start("b"), rides=True)  # due 0.3 s after a's
    recorder.buffer(start("c"))  # goes with the first batch
    deadline = time.monotonic() + 5
    while not book.batches:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert book.batches[0] == 2  # a and c
    assert book.get("b").state == "queued"  # type: ignore[union-attr]
    assert [entry.item[0] for entry in recorder.take("b")] == ["b"]  # still there to take
    recorder.close()


def wait_until(condition: Callable[[], bool], seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.005)


def test_a_busy_writer_is_not_woken_per_event_yet_each_waits_only_its_delay() -> None:
    """While events keep coming, the writer with an empty queue looks again every
    ``flush_delay`` by itself (no wake-up per event); an event is still sent once its own
    delay is over, and a delay lowered meanwhile wakes it."""
    book = FlakyBook(0)
    for task_id in ("a", "b", "c"):
        book.create(id=task_id, now_ms=0, ttl_ms=10_000, max_attempts=1)
    recorder = make(book, flush_delay=0.3)
    recorder.buffer(start("a"), rides=True)
    assert [entry.item[0] for entry in recorder.take("a")] == ["a"]  # rode with its result
    # The writer finds the queue empty: it looks again by itself.
    wait_until(lambda: 0 < recorder._idle_until < float("inf"))
    began = time.monotonic()
    recorder.buffer(start("b"), rides=True)
    while book.get("b").state != "running":  # type: ignore[union-attr]
        assert time.monotonic() - began < 5
        time.sleep(0.005)
    assert 0.25 <= time.monotonic() - began < 1.5  # its own delay
    recorder.flush_delay = 5.0
    time.sleep(0.35)  # the writer waits 5 s now, with an empty queue
    recorder.flush_delay = 0.01
    began = time.monotonic()
    recorder.buffer(start("c"), rides=True)  # due before the writer would look: woken
    while book.get("c").state != "running":  # type: ignore[union-attr]
        assert time.monotonic() - began < 2
        time.sleep(0.005)
    recorder.close()


def test_flush_wakes_a_writer_that_would_look_again_later() -> None:
    book = FlakyBook(0)
    for task_id in ("a", "b"):
        book.create(id=task_id, now_ms=0, ttl_ms=10_000, max_attempts=1)
    recorder = make(book, flush_delay=5.0)
    recorder.buffer(start("a"))
    recorder.flush()
    # The queue is empty and an event came lately: the writer looks again in 5 s.
    wait_until(lambda: 0 < recorder._idle_until < float("inf"))
    recorder.buffer(start("b"))  # due in 5 s: not woken for it
    began = time.monotonic()
    recorder.flush()
    assert time.monotonic() - began < 2.0
    assert book.get("b").state == "running"  # type: ignore[union-attr]
    recorder.close()


def test_an_idle_writer_sleeps_until_woken() -> None:
    book = FlakyBook(0)
    book.create(id="t", now_ms=0, ttl_ms=10_000, max_attempts=1)
    recorder = make(book, flush_delay=0.01)
    recorder._last_queued = time.monotonic() - 2.0  # nothing queued for a while
    recorder.flush()  # starts nothing: the writer is not running yet
    recorder.buffer(start("t"))
    deadline = time.monotonic() + 5
    while book.get("t").state != "running":  # type: ignore[union-attr]
        assert time.monotonic() < deadline
        time.sleep(0.005)
    recorder._last_queued = time.monotonic() - 2.0  # nothing came for a while
    wait_until(lambda: recorder._idle_until == float("inf"))
    recorder.buffer(start("t", at=3))  # woken: written within its delay
    time.sleep(0.5)
    assert recorder.held == 0
    recorder.close()


def test_events_of_a_task_created_late_are_sent_again_first_in_order() -> None:
    book = FlakyBook(0)
    created: list[str] = []

    def create(task_id: str) -> bool:
        created.append(task_id)
        book.create(id=task_id, now_ms=0, ttl_ms=10_000, max_attempts=1)
        return True

    recorder = Recorder(
        lambda: book,
        flush_delay=0.01,
        retry_for=3.0,
        creator_of=lambda task_id: functools.partial(create, task_id),
    )
    progress = {"type": "progress", "atMs": 2, "progress": 40, "cursor": "c"}
    recorder.buffer(start("t"))
    recorder.buffer(("t", progress, "t:progress"))
    deadline = time.monotonic() + 5
    while (task := book.get("t")) is None or task.progress != 40:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert created == ["t"]  # once
    assert [entry.event.type for entry in task.history] == ["start", "progress"]
    recorder.close()


def test_a_result_taking_the_events_of_a_task_being_created_waits_for_them() -> None:
    """The writer met "unknown" and creates the task; the execution's result, seeing the
    task exist, takes its events: it gets the start, to send before its end (found by
    make test: the end went alone, was refused as not running, and Celery said SUCCESS
    while the book said running)."""
    book = FlakyBook(0)
    created, go_on = threading.Event(), threading.Event()

    def create() -> bool:
        book.create(id="t", now_ms=0, ttl_ms=10_000, max_attempts=1)
        created.set()  # the task body sees it and returns: its result takes the events
        go_on.wait(5)
        return True

    recorder = Recorder(lambda: book, flush_delay=0.0, retry_for=3.0, creator_of=lambda _: create)
    recorder.buffer(start("t"))
    assert created.wait(5)
    taken: list[tuple[list[str | None], str]] = []

    def take() -> None:
        entries = [entry.item[2] for entry in recorder.take("t")]
        task = book.get("t")
        assert task is not None
        taken.append((entries, task.state.value))

    taker = threading.Thread(target=take)
    taker.start()
    time.sleep(0.2)
    go_on.set()
    taker.join(5)
    # The start is taken, or the writer sent it first: the end never goes before it.
    assert taken in ([(["t:start"], "queued")], [([], "running")]), taken
    recorder.close()


def test_events_of_a_task_nobody_creates_are_let_go(caplog: pytest.LogCaptureFixture) -> None:
    book = FlakyBook(0)
    recorder = Recorder(
        lambda: book, flush_delay=0.0, retry_for=3.0, creator_of=lambda _: lambda: False
    )
    (result,) = recorder.write(start("ghost"))
    assert isinstance(result, AsyncBookError)
    assert "unknown task" in caplog.text
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


class DownForAWhile(MemoryBook):
    """A MemoryBook that refuses connections until ``up_at`` (monotonic) and may hang."""

    def __init__(self, down_for: float, hang: float = 0.0) -> None:
        super().__init__()
        self.up_at = time.monotonic() + down_for
        self.hang = hang

    def apply_many(
        self, items: Iterable[ApplyItem], *, full_task: bool = True
    ) -> list[CallbackResult | AsyncBookError]:
        if time.monotonic() < self.up_at:
            if self.hang:
                time.sleep(self.hang)
            raise redis.ConnectionError("book down")
        return super().apply_many(items, full_task=full_task)


def wait_for(check: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_an_outage_longer_than_retry_for_loses_no_event() -> None:
    """The start is held through the outage, so the success after it is accepted."""
    book = DownForAWhile(1.0)
    for task_id in ("a", "b", "c", "d"):
        book.create(id=task_id, now_ms=0, ttl_ms=10**15, max_attempts=1)
    recorder = make(book, flush_delay=0.01, retry_for=0.3)
    for task_id in ("a", "b", "c", "d"):
        recorder.buffer(start(task_id))
    time.sleep(0.6)  # longer than retry_for, the book still down
    wait_for(lambda: time.monotonic() >= book.up_at)
    results = recorder.write(*(succeed(task_id) for task_id in ("a", "b", "c", "d")))
    assert [r.reason for r in results if isinstance(r, CallbackResult)] == ["succeeded"] * 4
    for task_id in ("a", "b", "c", "d"):
        task = book.get(task_id)
        assert task is not None
        assert [e.event.type for e in task.history] == ["start", "succeed"]
    recorder.close()


def test_write_waits_at_most_retry_for_even_when_the_book_hangs() -> None:
    book = DownForAWhile(1.5, hang=1.0)
    book.create(id="h", now_ms=0, ttl_ms=10**15, max_attempts=1)
    recorder = make(book, flush_delay=0.0, retry_for=0.3)
    started = time.monotonic()
    assert recorder.write(start("h")) == [None]
    assert time.monotonic() - started < 0.9
    wait_for(lambda: book.get("h") is not None and book.get("h").state == "running")  # type: ignore[union-attr]
    assert recorder.held == 0
    recorder.close()


def test_held_events_go_once_their_deadline_has_passed(caplog: pytest.LogCaptureFixture) -> None:
    book = DownForAWhile(10**6)
    book.create(id="old", now_ms=0, ttl_ms=10, max_attempts=1)
    recorder = make(book, flush_delay=0.0, retry_for=0.1)
    with caplog.at_level(logging.ERROR, "asyncbook.celery"):
        recorder.buffer(start("old"), deadline_ms=10)  # long past
        wait_for(lambda: recorder.held == 0)
    assert "deadline has passed" in caplog.text
    assert "old" in caplog.text
    recorder.close()


def test_no_more_than_max_held_events_wait(caplog: pytest.LogCaptureFixture) -> None:
    book = DownForAWhile(10**6)
    recorder = Recorder(lambda: book, flush_delay=5.0, retry_for=0.1, max_held=3)
    with caplog.at_level(logging.ERROR, "asyncbook.celery"):
        for n in range(5):
            recorder.buffer(start(f"t{n}"))
    assert recorder.held == 3
    assert "more than 3 events" in caplog.text
    assert "t0" in caplog.text
    assert "t1" in caplog.text


def test_retrying_waits_at_most_retry_for_when_each_attempt_blocks() -> None:
    """A hung Redis: every attempt blocks for its socket timeout, then fails."""
    calls: list[float] = []

    def hang() -> None:
        calls.append(time.monotonic())
        time.sleep(0.4)
        raise redis.TimeoutError("no answer")

    started = time.monotonic()
    assert retrying(hang, 1.0, "creating task t-hung", attempt_timeout=0.4) is None
    assert time.monotonic() - started <= 1.0 + 0.1
    assert len(calls) >= 2


def test_held_events_create_their_task_after_its_execution_ended() -> None:
    """The book down at publish and during the run (issue 30): back after the execution
    ended, it answers "unknown"; the events carry how to create their task."""
    book = FlakyBook(3)
    running: dict[str, Callable[[], bool]] = {}
    created: list[str] = []

    def create(task_id: str) -> bool:
        created.append(task_id)
        book.create(id=task_id, now_ms=0, ttl_ms=60_000, max_attempts=3)
        return True

    recorder = Recorder(lambda: book, flush_delay=0.0, retry_for=0.2, creator_of=running.get)
    running["t"] = lambda: create("t")
    progress = {"type": "progress", "atMs": 2, "progress": 40, "cursor": "c"}
    recorder.buffer(start("t"))
    recorder.buffer(("t", progress, "t:progress"))
    (answer,) = recorder.write(succeed("t", at=3))
    assert answer is None  # not answered within retry_for: held
    del running["t"]  # the execution is over
    deadline = time.monotonic() + 5
    while (task := book.get("t")) is None or not task.terminal:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert created == ["t"]
    assert [entry.event.type for entry in task.history] == ["start", "progress", "succeed"]
    assert task.max_attempts == 3
    recorder.close()
