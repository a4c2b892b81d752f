"""One run per task in process: when a delivery claims its run (the rules of
``asyncbook.celery._one_run``), a delivery of a task another live attempt holds is not
run (acknowledged, audited, no result stored), an overdue holder is recovered from, the
opt-out and the setting, and their bad values."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery, Task
from celery.app.task import Context
from celery.signals import before_task_publish

from asyncbook import AsyncBookError, RedisBook
from asyncbook.celery import Integration, SettingsError, tracked
from asyncbook.celery._one_run import OneRun
from asyncbook.celery._settings import Settings
from asyncbook.celery._state import Lazy
from asyncbook.celery._tracking import now_ms

from ..support.celery import history, memory_app, threaded_worker, unique, wait_for

pytestmark = [pytest.mark.redis, pytest.mark.timeout(60)]

RUNS: list[str] = []


def make_app() -> Celery:
    app = memory_app("one-run")  # one run per task is on by default

    @app.task(bind=True, shared=False, tracked=True, ttl=60, acks_late=True, name="one.work")
    def work(self: Task[Any, Any]) -> str:
        RUNS.append(str(self.request.id))
        return "ran"

    @app.task(shared=False, tracked=True, ttl=60, name="one.early")
    def early() -> None:
        pass

    @app.task(shared=False, tracked=True, ttl=60, one_run=False, acks_late=True, name="one.out")
    def out() -> None:
        pass

    @app.task(
        shared=False, tracked=True, ttl=60, heartbeat_timeout=0, acks_late=True, name="one.blind"
    )
    def blind() -> None:
        pass

    return app


@pytest.fixture
def app() -> Celery:
    return make_app()


@pytest.fixture
def worker(app: Celery, book: RedisBook) -> Iterator[Integration]:
    with threaded_worker(app, book) as integration:
        yield integration


def rules(app: Celery, visibility_timeout: float | None = None) -> OneRun:
    if visibility_timeout is not None:
        app.conf.broker_transport_options = {"visibility_timeout": visibility_timeout}
    settings = Settings.from_conf(app.conf)
    return OneRun(app, Lazy.ready(settings), Lazy(lambda: pytest.fail("no book")))


def request(**fields: Any) -> Context:
    fields.setdefault("delivery_info", {})
    return Context(**fields)


def test_a_claim_is_made_only_where_a_second_copy_may_exist(app: Celery) -> None:
    one = rules(app, visibility_timeout=2)
    settings = Settings.from_conf(app.conf)
    work, early, out = (app.tasks[f"one.{name}"] for name in ("work", "early", "out"))
    fresh = now_ms() + 60_000  # the deadline of a task published just now (ttl 60 s)

    def claims(task: Task[Any, Any], **fields: Any) -> bool:
        return one.needs_claim(task, request(**fields), settings)

    assert claims(work, asyncbook_deadline_ms=fresh)  # acks_late: unacked while it runs
    assert not claims(early, asyncbook_deadline_ms=fresh)  # acked at its start, soon
    assert claims(early, asyncbook_deadline_ms=fresh, eta="2030-01-01T00:00:00")
    assert claims(early, asyncbook_deadline_ms=fresh, delivery_info={"redelivered": True})
    assert claims(early, asyncbook_deadline_ms=fresh - 1_000)  # waited half the timeout
    assert claims(early)  # publish time unknown
    assert not claims(out, asyncbook_deadline_ms=fresh)  # opted out


def test_without_a_visibility_timeout_the_redis_default_counts(app: Celery) -> None:
    one = rules(app)
    settings = Settings.from_conf(app.conf)
    early = app.tasks["one.early"]
    published_long_ago = now_ms() + 60_000 - 10 * 60_000  # ten minutes ago
    assert not one.needs_claim(early, request(asyncbook_deadline_ms=published_long_ago), settings)


def test_a_delivery_of_a_task_a_live_attempt_holds_is_not_run(
    app: Celery, book: RedisBook, worker: Integration
) -> None:
    task_id = unique("held")
    book.create(
        id=task_id, now_ms=book.now_ms(), ttl_ms=60_000, max_attempts=3, heartbeat_timeout_ms=60_000
    )
    assert book.claim_run(task_id, "elsewhere") is not None  # the live first run
    app.tasks["one.work"].apply_async(task_id=task_id)
    wait_for(lambda: book.audit(task_id), timeout=10)
    (entry,) = book.audit(task_id)
    assert (entry.action, entry.outcome, entry.reason) == (
        "suppress",
        "held",
        "attempt 1 is running",
    )
    assert entry.actor not in ("", "elsewhere")  # the duplicate's worker
    assert task_id not in RUNS
    task = book.get(task_id)
    assert task is not None
    assert (task.state, history(task)) == ("running", ["start"])
    assert app.AsyncResult(task_id).state == "PENDING"  # no result stored


def test_a_delivery_over_an_overdue_holder_runs_as_the_next_attempt(
    app: Celery, book: RedisBook, worker: Integration
) -> None:
    task_id = unique("stalled")
    book.create(
        id=task_id,
        now_ms=book.now_ms(),
        ttl_ms=60_000,
        max_attempts=3,
        heartbeat_timeout_ms=1,
        retry_on_stall=True,
    )
    book.claim_run(task_id, "dead-worker")
    time.sleep(0.01)  # its heartbeat is overdue
    result = app.tasks["one.work"].apply_async(task_id=task_id)
    assert result.get(timeout=10) == "ran"
    task = wait_for(lambda: (t := book.get(task_id)) and t.state == "succeeded" and t)
    assert (history(task), task.attempts) == (["start", "fail", "start", "succeed"], 2)
    assert task_id in RUNS


def held_by_a_silent_holder(book: RedisBook, name: str, timeout_ms: int) -> str:
    """A task whose first attempt ("elsewhere") is running and never beats."""
    task_id = unique(name)
    book.create(
        id=task_id,
        now_ms=book.now_ms(),
        ttl_ms=60_000,
        max_attempts=3,
        heartbeat_timeout_ms=timeout_ms,
        retry_on_stall=True,
    )
    assert book.claim_run(task_id, "elsewhere") is not None
    return task_id


def test_a_held_delivery_is_postponed_and_runs_when_its_holder_stalled(
    app: Celery, book: RedisBook, worker: Integration
) -> None:
    """The killed pool child's case: the holder is dead but its heartbeat still fresh.
    The delivery is sent again to after its stall time, and then runs as the next attempt."""
    task_id = held_by_a_silent_holder(book, "postponed", 1_500)
    result = app.tasks["one.work"].apply_async(task_id=task_id)
    assert result.get(timeout=20) == "ran"
    task = wait_for(lambda: (t := book.get(task_id)) and t.state == "succeeded" and t)
    assert (history(task), task.attempts) == (["start", "fail", "start", "succeed"], 2)
    assert task.history[1].event.error == "stalled: no heartbeat for 1500 ms"
    assert [(e.action, e.outcome) for e in book.audit(task_id)] == [("suppress", "held")]
    assert RUNS.count(task_id) == 1


def test_a_postponed_delivery_whose_holder_ended_is_dropped(
    app: Celery, book: RedisBook, worker: Integration
) -> None:
    task_id = held_by_a_silent_holder(book, "ended-meanwhile", 1_500)
    app.tasks["one.work"].apply_async(task_id=task_id)
    wait_for(lambda: book.audit(task_id), timeout=10)  # held, and sent again
    book.apply(
        task_id, {"type": "succeed", "atMs": book.now_ms(), "resultRef": "r", "resultHash": "h"}
    )
    wait_for(lambda: len(book.audit(task_id)) == 2, timeout=15)
    outcomes = [e.outcome for e in book.audit(task_id)]
    assert outcomes == ["terminal-conflict", "held"]  # newest first
    assert task_id not in RUNS
    assert app.AsyncResult(task_id).state == "PENDING"  # no result stored


def test_held_copies_before_the_stall_time_are_dropped_not_postponed(
    app: Celery, book: RedisBook, worker: Integration
) -> None:
    """Only the first held delivery per stall period is sent again."""
    task_id = held_by_a_silent_holder(book, "copies", 10_000)
    sent: list[dict[str, Any]] = []

    def record(headers: dict[str, Any] | None = None, **_: Any) -> None:
        if headers is not None and headers.get("id") == task_id:
            sent.append(dict(headers))

    before_task_publish.connect(record, weak=False)
    try:
        for _ in range(3):
            app.tasks["one.work"].apply_async(task_id=task_id)
        wait_for(lambda: len(book.audit(task_id)) == 3, timeout=10)
        # The first held delivery's copy is published after its claim's audit entry.
        wait_for(lambda: any(h.get("asyncbook_postponed") for h in sent), timeout=10)
        time.sleep(0.5)  # a second copy, if one were sent, would be published by now
    finally:
        before_task_publish.disconnect(record)
    postponed = [h for h in sent if h.get("asyncbook_postponed")]
    assert len(postponed) == 1
    (copy,) = postponed
    assert (copy["asyncbook_postponed"], copy["retries"], copy["asyncbook_created"]) == (1, 0, True)
    assert copy["eta"] is not None
    assert task_id not in RUNS
    task = book.get(task_id)
    assert task is not None
    assert (task.state, history(task)) == ("running", ["start"])  # no retry recorded


def test_a_delivery_of_an_ended_task_is_not_run_again(
    app: Celery, book: RedisBook, worker: Integration
) -> None:
    task_id = unique("ended")
    result = app.tasks["one.work"].apply_async(task_id=task_id)
    assert result.get(timeout=10) == "ran"
    wait_for(lambda: (t := book.get(task_id)) and t.state == "succeeded")
    app.tasks["one.work"].apply_async(task_id=task_id)  # as a restored copy would come
    wait_for(lambda: book.audit(task_id), timeout=10)
    (entry,) = book.audit(task_id)
    assert (entry.action, entry.outcome) == ("suppress", "terminal-conflict")
    assert RUNS.count(task_id) == 1
    assert result.get(timeout=1) == "ran"


def test_bad_one_run_values_name_their_field(app: Celery) -> None:
    with pytest.raises(AsyncBookError) as raised:
        tracked(app.tasks["one.early"], one_run="yes")  # type: ignore[call-overload]
    assert raised.value.field == "one_run"
    with pytest.raises(AsyncBookError) as raised:
        Settings.from_conf({"asyncbook_one_run": 1})
    assert raised.value.field == "asyncbook_one_run"
    app.tasks["one.early"].one_run = "sometimes"  # type: ignore[attr-defined]
    with pytest.raises(SettingsError, match=r"one_run of task one\.early must be True or False"):
        rules(app).hook_tracked(check=True)


def test_the_setting_turns_it_off_and_a_task_turns_it_back_on(app: Celery) -> None:
    app.conf.asyncbook_one_run = False
    one = rules(app)
    settings = Settings.from_conf(app.conf)
    assert not one.needs_claim(app.tasks["one.work"], request(), settings)
    app.tasks["one.work"].one_run = True  # type: ignore[attr-defined]
    assert one.needs_claim(app.tasks["one.work"], request(), settings)
