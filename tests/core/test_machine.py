"""The pure machine, docs/spec.md rule by rule: every reason string and every error."""

from __future__ import annotations

import math
from typing import Any

import pytest

from asyncbook import (
    AsyncBookError,
    AsyncEvent,
    AsyncState,
    AsyncTask,
    apply_async_event,
    create_async_task,
    expire_task,
    to_wire,
)

from ..support.events import expire, fail, progress, start, succeed


def new(ttl: float = 1000, max_attempts: int = 2) -> AsyncTask:
    return create_async_task(id="t1", now_ms=0, ttl_ms=ttl, max_attempts=max_attempts)


def running(**kwargs: Any) -> AsyncTask:
    return apply_async_event(new(**kwargs), start()).task


def assert_invalid(call: Any, field: str) -> AsyncBookError:
    with pytest.raises(AsyncBookError) as caught:
        call()
    assert caught.value.code == "invalid-request"
    assert field in str(caught.value)
    return caught.value


class TestCreate:
    def test_new_task_is_queued_with_deadline(self) -> None:
        task = create_async_task(id="a", now_ms=100, ttl_ms=50, max_attempts=3)
        assert to_wire(task) == {
            "id": "a",
            "state": "queued",
            "expiresAtMs": 150,
            "attempts": 0,
            "maxAttempts": 3,
            "progress": 0,
            "version": 0,
            "history": [],
        }

    @pytest.mark.parametrize("task_id", ["", " ", "\t\n", "\u3000", "\ufeff", "\u00a0\u2028"])
    def test_blank_id(self, task_id: str) -> None:
        assert_invalid(
            lambda: create_async_task(id=task_id, now_ms=0, ttl_ms=1, max_attempts=1), "id"
        )

    @pytest.mark.parametrize("task_id", ["\x1c", "\x85", "x "])
    def test_python_only_whitespace_is_not_blank(self, task_id: str) -> None:
        assert create_async_task(id=task_id, now_ms=0, ttl_ms=1, max_attempts=1).id == task_id

    @pytest.mark.parametrize("now", [-1, math.nan, math.inf, "5", True, None])
    def test_bad_now(self, now: Any) -> None:
        assert_invalid(
            lambda: create_async_task(id="a", now_ms=now, ttl_ms=1, max_attempts=1), "nowMs"
        )

    @pytest.mark.parametrize("ttl", [0, -1, -0.0, math.nan, math.inf, "5", False])
    def test_bad_ttl(self, ttl: Any) -> None:
        assert_invalid(
            lambda: create_async_task(id="a", now_ms=0, ttl_ms=ttl, max_attempts=1), "ttlMs"
        )

    @pytest.mark.parametrize("attempts", [0, -1, 1.5, math.nan, "1", True])
    def test_bad_max_attempts(self, attempts: Any) -> None:
        assert_invalid(
            lambda: create_async_task(id="a", now_ms=0, ttl_ms=1, max_attempts=attempts),
            "maxAttempts",
        )

    def test_integral_floats_are_integers(self) -> None:
        task = create_async_task(id="a", now_ms=-0.0, ttl_ms=40.0, max_attempts=2.0)  # type: ignore[arg-type]
        assert to_wire(task)["expiresAtMs"] == 40
        assert isinstance(task.max_attempts, int)

    def test_non_integral_times_are_kept(self) -> None:
        assert create_async_task(id="a", now_ms=0.5, ttl_ms=1, max_attempts=1).expires_at_ms == 1.5


class TestTerminal:
    def test_expire_live_task_records_the_deadline(self) -> None:
        result = expire_task(running(ttl=500))
        assert (result.changed, result.notify, result.reason) == (True, True, "expired")
        assert result.task.state == AsyncState.EXPIRED
        assert to_wire(result.task.history[-1]) == {
            "version": 2,
            "event": {"type": "expire", "atMs": 500},
        }

    def test_expire_expired_is_duplicate(self) -> None:
        task = expire_task(new()).task
        result = expire_task(task)
        assert (result.changed, result.duplicate, result.reason) == (
            False,
            True,
            "duplicate-expire",
        )
        assert result.task == task

    def test_expire_other_terminal_is_conflict(self) -> None:
        task = apply_async_event(running(), succeed()).task
        result = expire_task(task)
        assert (result.changed, result.duplicate, result.reason) == (
            False,
            False,
            "terminal-conflict",
        )

    def test_same_result_twice_is_duplicate(self) -> None:
        task = apply_async_event(running(), succeed(digest="h")).task
        result = apply_async_event(task, succeed(digest="h", ref="elsewhere"))
        assert (result.duplicate, result.reason) == (True, "duplicate-result")
        assert result.task == task

    def test_other_result_is_conflict(self) -> None:
        task = apply_async_event(running(), succeed(digest="h")).task
        result = apply_async_event(task, succeed(digest="other"))
        assert (result.changed, result.duplicate, result.reason) == (
            False,
            False,
            "terminal-conflict",
        )

    def test_expire_event_on_expired_is_duplicate(self) -> None:
        task = expire_task(new()).task
        assert apply_async_event(task, expire()).reason == "duplicate-expire"

    @pytest.mark.parametrize("event", [start(), progress(5), fail(), expire()])
    def test_anything_else_on_succeeded_is_conflict(self, event: Any) -> None:
        task = apply_async_event(running(), succeed()).task
        result = apply_async_event(task, event)
        assert (result.changed, result.notify, result.reason) == (False, False, "terminal-conflict")

    def test_success_on_failed_is_conflict(self) -> None:
        task = apply_async_event(running(), fail()).task
        assert apply_async_event(task, succeed()).reason == "terminal-conflict"

    def test_bad_time_is_an_error_even_when_terminal(self) -> None:
        task = expire_task(new()).task
        assert_invalid(lambda: apply_async_event(task, expire(at=-1)), "event.atMs")
        assert_invalid(lambda: apply_async_event(task, start(at=math.nan)), "event.atMs")


class TestDeadline:
    def test_late_success_expires_the_task(self) -> None:
        result = apply_async_event(running(ttl=100), succeed(at=100))
        assert (result.reason, result.notify) == ("expired", True)
        assert result.task.state == AsyncState.EXPIRED
        assert result.task.result_ref is None
        assert to_wire(result.task.history[-1].event) == {"type": "expire", "atMs": 100}

    def test_success_just_before_deadline_succeeds(self) -> None:
        assert apply_async_event(running(ttl=100), succeed(at=99.5)).reason == "succeeded"

    def test_early_expire_event_is_recorded_at_deadline(self) -> None:
        result = apply_async_event(new(ttl=100), expire(at=5))
        assert to_wire(result.task.history[-1].event) == {"type": "expire", "atMs": 100}

    def test_late_start_expires(self) -> None:
        assert apply_async_event(new(ttl=10), start(at=10)).reason == "expired"


class TestStart:
    def test_start(self) -> None:
        result = apply_async_event(new(), start())
        assert (result.changed, result.notify, result.reason) == (True, False, "started")
        assert (result.task.state, result.task.attempts, result.task.version) == ("running", 1, 1)

    def test_already_running(self) -> None:
        result = apply_async_event(running(), start())
        assert (result.changed, result.duplicate, result.reason) == (False, True, "already-running")

    def test_not_startable_when_out_of_attempts(self) -> None:
        task = apply_async_event(running(max_attempts=1), fail(retryable=True)).task
        assert task.state == "failed"
        task = new(max_attempts=1).model_copy(update={"attempts": 1})
        result = apply_async_event(task, start())
        assert (result.changed, result.duplicate, result.reason) == (False, False, "not-startable")

    def test_start_resets_progress_and_keeps_error(self) -> None:
        task = apply_async_event(running(), progress(50)).task
        task = apply_async_event(task, fail(error="transient", retryable=True)).task
        task = apply_async_event(task, start(at=4)).task
        assert (task.progress, task.error, task.attempts) == (0, "transient", 2)


class TestProgress:
    def test_progress(self) -> None:
        result = apply_async_event(running(), progress(40, cursor="chunk-4"))
        assert (result.reason, result.task.progress, result.notify) == ("progress", 40, False)
        assert to_wire(result.task.history[-1].event)["cursor"] == "chunk-4"
        assert "cursor" not in to_wire(result.task)

    def test_not_running_checked_before_value(self) -> None:
        assert apply_async_event(new(), progress(12.5)).reason == "not-running"
        assert apply_async_event(new(), progress(-3)).reason == "not-running"

    @pytest.mark.parametrize("value", [12.5, -1, math.nan, math.inf])
    def test_not_an_integer(self, value: float) -> None:
        assert_invalid(lambda: apply_async_event(running(), progress(value)), "progress")

    def test_over_100(self) -> None:
        assert_invalid(lambda: apply_async_event(running(), progress(101)), "progress")

    def test_stale(self) -> None:
        task = apply_async_event(running(), progress(50)).task
        result = apply_async_event(task, progress(20))
        assert (result.changed, result.duplicate, result.reason) == (False, False, "stale-progress")

    def test_equal_is_duplicate(self) -> None:
        task = apply_async_event(running(), progress(50)).task
        result = apply_async_event(task, progress(50.0))
        assert (result.changed, result.duplicate, result.reason) == (
            False,
            True,
            "duplicate-progress",
        )

    def test_zero_on_fresh_attempt_is_duplicate(self) -> None:
        assert apply_async_event(running(), progress(0)).reason == "duplicate-progress"

    def test_integral_float_counts_as_integer(self) -> None:
        assert apply_async_event(running(), progress(40.0)).task.progress == 40


class TestSucceedFail:
    @pytest.mark.parametrize("event", [succeed(), fail()])
    def test_not_running(self, event: Any) -> None:
        result = apply_async_event(new(), event)
        assert (result.changed, result.reason) == (False, "not-running")

    def test_succeed(self) -> None:
        result = apply_async_event(running(), succeed(ref="r", digest="h"))
        assert (result.reason, result.notify) == ("succeeded", True)
        assert (result.task.progress, result.task.result_ref, result.task.result_hash) == (
            100,
            "r",
            "h",
        )

    @pytest.mark.parametrize(
        ("ref", "digest", "field"), [("", "h", "resultRef"), ("r", " \u2029", "resultHash")]
    )
    def test_blank_result(self, ref: str, digest: str, field: str) -> None:
        assert_invalid(lambda: apply_async_event(running(), succeed(ref=ref, digest=digest)), field)

    def test_retryable_fail_requeues(self) -> None:
        task = apply_async_event(running(), progress(30)).task
        result = apply_async_event(task, fail(error="oom", retryable=True))
        assert (result.reason, result.notify, result.task.state) == ("requeued", False, "queued")
        assert (result.task.progress, result.task.error) == (0, "oom")

    def test_retryable_fail_without_attempts_left_fails(self) -> None:
        result = apply_async_event(running(max_attempts=1), fail(retryable=True))
        assert (result.reason, result.notify, result.task.state) == ("failed", True, "failed")

    def test_fatal_fail(self) -> None:
        result = apply_async_event(running(), fail(error="bad input"))
        assert (result.reason, result.task.error) == ("failed", "bad input")

    def test_unchanged_results_never_notify(self) -> None:
        assert not apply_async_event(new(), succeed()).notify


def test_versions_and_history_are_contiguous() -> None:
    task = new(max_attempts=2)
    events: list[AsyncEvent] = [
        start(),
        progress(10),
        fail(retryable=True),
        start(at=4),
        progress(90, at=5),
        succeed(at=6),
    ]
    for event in events:
        task = apply_async_event(task, event).task
    assert [entry.version for entry in task.history] == [1, 2, 3, 4, 5, 6]
    assert task.version == 6


def test_wire_mapping_is_accepted() -> None:
    result = apply_async_event(new(), {"type": "start", "atMs": 1, "worker": "w"})
    assert result.reason == "started"
