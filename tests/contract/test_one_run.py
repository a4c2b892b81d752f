"""One run per task (extension): ``claim_run`` on every book, sharded ones included."""

from __future__ import annotations

import time

import pytest

from asyncbook import (
    AsyncBook,
    AsyncBookError,
    AuditedBook,
    AuditEntry,
    CallbackResult,
    FailEvent,
    Held,
)

from ..support.events import progress, succeed

FAR = 10**15


def audit(book: AsyncBook, task_id: str) -> list[object]:
    assert isinstance(book, AuditedBook)
    return list(book.audit(task_id))


def watched(book: AsyncBook, task_id: str = "r", timeout: int = 60_000, retry: bool = True) -> None:
    book.create(
        id=task_id,
        now_ms=book.now_ms(),
        ttl_ms=FAR,
        max_attempts=3,
        heartbeat_timeout_ms=timeout,
        retry_on_stall=retry,
    )


def test_the_first_claim_starts_the_task_as_a_start_would(book: AsyncBook) -> None:
    watched(book)
    result = book.claim_run("r", "w1", callback_id="r:start:1")
    assert isinstance(result, CallbackResult)
    assert (result.reason, result.changed, result.task.state, result.task.attempts) == (
        "started",
        True,
        "running",
        1,
    )
    assert result.task.history[-1].event.model_dump(by_alias=True)["worker"] == "w1"
    assert audit(book, "r") == []


def test_a_claim_on_a_live_run_changes_nothing_and_is_audited(book: AsyncBook) -> None:
    watched(book)
    book.claim_run("r", "w1", callback_id="r:start:1")
    before = book.get("r")
    held = book.claim_run("r", "w2", callback_id="r:start:2")
    assert isinstance(held, Held)
    assert (held.attempts, held.postpone) == (1, True)
    assert 0 < held.stall_at_ms - held.now_ms <= 60_000
    assert book.get("r") == before  # no version, no history entry: the contract's answers
    (entry,) = audit(book, "r")
    assert isinstance(entry, AuditEntry)
    assert (entry.actor, entry.action, entry.outcome, entry.reason) == (
        "w2",
        "suppress",
        "held",
        "attempt 1 is running",
    )
    # The live run goes on and ends as usual.
    book.apply("r", progress(50, at=book.now_ms()))
    assert book.apply("r", succeed(at=book.now_ms())).reason == "succeeded"


def test_a_repeated_callback_id_is_a_duplicate_callback_even_while_held(book: AsyncBook) -> None:
    watched(book)
    book.claim_run("r", "w1", callback_id="r:start:1")
    again = book.claim_run("r", "w1", callback_id="r:start:1")
    assert isinstance(again, CallbackResult)
    assert (again.reason, again.duplicate_callback) == ("duplicate-callback", True)


@pytest.mark.parametrize("retry_on_stall", [True, False])
def test_a_claim_over_an_overdue_run_ends_it_as_the_sweep_would_and_starts(
    book: AsyncBook, retry_on_stall: bool
) -> None:
    watched(book, timeout=1, retry=retry_on_stall)  # retryable either way: this is its redelivery
    book.claim_run("r", "w1", callback_id="r:start:1")
    time.sleep(0.01)  # the first run's heartbeat is overdue now (1 ms timeout)
    result = book.claim_run("r", "w2", callback_id="r:start:2")
    assert isinstance(result, CallbackResult)
    assert (result.reason, result.task.state, result.task.attempts) == ("started", "running", 2)
    stalled = result.task.history[-2].event
    assert isinstance(stalled, FailEvent)
    assert stalled.error == "stalled: no heartbeat for 1 ms"
    assert stalled.retryable
    assert book.end_stalled(book.now_ms() - 10_000) == []  # not ended twice
    assert audit(book, "r") == []


def test_without_a_heartbeat_watch_a_claim_is_a_start(book: AsyncBook) -> None:
    book.create(id="u", now_ms=book.now_ms(), ttl_ms=FAR, max_attempts=2)
    assert isinstance(book.claim_run("u", "w1"), CallbackResult)
    again = book.claim_run("u", "w2")
    assert isinstance(again, CallbackResult)
    assert (again.reason, again.duplicate) == ("already-running", True)


def test_claims_answer_as_starts_on_queued_and_ended_tasks(book: AsyncBook) -> None:
    watched(book, retry=False)
    first = book.claim_run("r", "w1")
    assert isinstance(first, CallbackResult)
    book.apply("r", succeed(at=book.now_ms()))
    late = book.claim_run("r", "w2")
    assert isinstance(late, CallbackResult)
    assert late.reason == "terminal-conflict"


def test_a_claim_past_the_deadline_expires_the_task(book: AsyncBook) -> None:
    watched(book)
    book.claim_run("r", "w1")
    result = book.claim_run("r", "w2", at_ms=FAR * 2)
    assert isinstance(result, CallbackResult)
    assert (result.reason, result.task.state) == ("expired", "expired")


@pytest.mark.parametrize(
    ("worker", "at_ms", "field"),
    [("", None, "worker"), ("w\n", None, "worker"), (7, None, "worker"), ("w", -1, "event.atMs")],
)
def test_bad_claims_name_their_field_and_change_nothing(
    book: AsyncBook, worker: object, at_ms: object, field: str
) -> None:
    watched(book)
    before = book.get("r")
    with pytest.raises(AsyncBookError) as raised:
        book.claim_run("r", worker, at_ms=at_ms)  # type: ignore[arg-type]
    assert (raised.value.code, raised.value.field) == ("invalid-request", field)
    assert book.get("r") == before


def test_a_claim_on_an_unknown_task_names_task_id(book: AsyncBook) -> None:
    with pytest.raises(AsyncBookError) as raised:
        book.claim_run("missing", "w1")
    assert raised.value.field == "taskId"


def test_one_held_claim_per_stall_period_is_postponed(book: AsyncBook) -> None:
    """The first held claim is sent again to after the holder's stall time; the copies
    held before that time is past are dropped; once it is past (the holder beat on), the
    next held claim is postponed again."""
    watched(book, timeout=2_000)
    book.claim_run("r", "w1")
    first = book.claim_run("r", "w2")
    second = book.claim_run("r", "w3")
    assert isinstance(first, Held)
    assert isinstance(second, Held)
    assert (first.postpone, second.postpone) == (True, False)
    time.sleep(1.2)
    assert book.heartbeat(["r"]) == 1  # the holder is alive: its stall time moves on
    time.sleep(1.2)  # past the first stall time, before the second
    third = book.claim_run("r", "w4")
    assert isinstance(third, Held)
    assert third.postpone
    assert third.stall_at_ms > first.stall_at_ms
    assert [entry.outcome for entry in audit(book, "r")] == ["held"] * 3  # type: ignore[attr-defined]
