"""Models and the wire format: the reference's JSON shape, strict types, clear errors."""

from __future__ import annotations

import json
from typing import Any

import pytest

from asyncbook import (
    AsyncBookError,
    CallbackResult,
    DeliveryResult,
    MemoryBook,
    Notification,
    ProgressEvent,
    ResumeResult,
    StartEvent,
    parse_event,
    parse_task,
    to_wire,
)
from asyncbook._jsrules import is_blank, utf16_key

from ..support.events import start, succeed

REFERENCE_TASK = {
    "id": "t",
    "state": "failed",
    "expiresAtMs": 1500.5,
    "attempts": 1,
    "maxAttempts": 1,
    "progress": 20,
    "version": 3,
    "error": "boom",
    "history": [
        {"version": 1, "event": {"type": "start", "atMs": 1, "worker": "w"}},
        {"version": 2, "event": {"type": "progress", "atMs": 2, "progress": 20, "cursor": "c"}},
        {
            "version": 3,
            "event": {"type": "fail", "atMs": 3.25, "error": "boom", "retryable": False},
        },
    ],
}


def test_parse_task_round_trips_reference_json() -> None:
    task = parse_task(json.loads(json.dumps(REFERENCE_TASK)))
    assert to_wire(task) == REFERENCE_TASK
    assert task.expires_at_ms == 1500.5
    assert task.result_ref is None


def test_every_result_serialises_camel_case() -> None:
    book = MemoryBook()
    book.create(id="t", now_ms=0, ttl_ms=100, max_attempts=1)
    result = book.apply("t", start(), "cb")
    assert isinstance(result, CallbackResult)
    assert set(to_wire(result)) == {
        "task",
        "changed",
        "duplicate",
        "notify",
        "reason",
        "duplicateCallback",
    }
    book.apply("t", succeed())
    resume = book.resume("t", 0)
    assert isinstance(resume, ResumeResult)
    assert set(to_wire(resume)) == {"mode", "events", "task"}
    delivery = book.deliver_result("t", "k", 7)
    assert isinstance(delivery, DeliveryResult)
    assert set(to_wire(delivery)["receipt"]) == {
        "taskId",
        "resultRef",
        "resultHash",
        "idempotencyKey",
        "deliveredAtMs",
    }
    assert to_wire(book.deliver_result("t", "k", 7)) == {
        **to_wire(delivery),
        "duplicate": True,
        "reason": "duplicate-delivery",
    }
    assert to_wire(Notification(task_id="t", state="expired", at_ms=3)) == {
        "taskId": "t",
        "state": "expired",
        "atMs": 3,
    }


def test_receipt_absent_when_not_delivered() -> None:
    book = MemoryBook()
    book.create(id="t", now_ms=0, ttl_ms=100, max_attempts=1)
    assert to_wire(book.deliver_result("t", "k", 1)) == {
        "ok": False,
        "duplicate": False,
        "reason": "not-succeeded",
    }


@pytest.mark.parametrize(
    "data",
    [
        {"type": "start", "atMs": 1, "worker": "w"},
        {"type": "progress", "atMs": 1, "progress": 5, "cursor": "c"},
        {"type": "succeed", "atMs": 1, "resultRef": "r", "resultHash": "h"},
        {"type": "fail", "atMs": 1, "error": "e", "retryable": True},
        {"type": "expire", "atMs": 1},
    ],
)
def test_events_round_trip(data: dict[str, Any]) -> None:
    assert to_wire(parse_event(data)) == data


def test_integral_floats_become_integers() -> None:
    event = parse_event({"type": "progress", "atMs": -0.0, "progress": 40.0, "cursor": ""})
    assert isinstance(event, ProgressEvent)
    assert (event.at_ms, event.progress) == (0, 40)
    assert type(event.progress) is int
    assert (
        json.dumps(to_wire(event))
        == '{"type": "progress", "atMs": 0, "progress": 40, "cursor": ""}'
    )


def test_non_integral_progress_survives_the_shape_check() -> None:
    event = parse_event({"type": "progress", "atMs": 1, "progress": 12.5, "cursor": ""})
    assert isinstance(event, ProgressEvent)
    assert event.progress == 12.5


def test_unknown_keys_ignored_and_not_stored() -> None:
    event = parse_event({"type": "expire", "atMs": 1, "secret": "x"})
    assert to_wire(event) == {"type": "expire", "atMs": 1}


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"type": "start", "atMs": "5", "worker": "w"}, "event.atMs"),
        ({"type": "start", "atMs": True, "worker": "w"}, "event.atMs"),
        ({"type": "start", "atMs": None, "worker": "w"}, "event.atMs"),
        ({"type": "start", "atMs": 1, "worker": 5}, "event.worker"),
        ({"type": "start", "atMs": 1}, "event.worker"),
        ({"type": "start", "at_ms": 1, "worker": "w"}, "event.atMs"),
        ({"type": "progress", "atMs": 1, "progress": "40", "cursor": ""}, "event.progress"),
        ({"type": "progress", "atMs": 1, "progress": 4}, "event.cursor"),
        ({"type": "succeed", "atMs": 1, "result_ref": "r", "resultHash": "h"}, "event.resultRef"),
        ({"type": "fail", "atMs": 1, "error": "e", "retryable": 0}, "event.retryable"),
        ({"type": "fail", "atMs": 1, "error": None, "retryable": False}, "event.error"),
        ({"type": "START", "atMs": 1}, "event.type"),
        ({"type": 1, "atMs": 1}, "event.type"),
        ({}, "event.type"),
    ],
)
def test_bad_events_name_the_field(data: dict[str, Any], field: str) -> None:
    with pytest.raises(AsyncBookError) as caught:
        parse_event(data)
    assert caught.value.code == "invalid-request"
    assert caught.value.field == field
    assert field in str(caught.value)


@pytest.mark.parametrize("data", [None, [], "start", 5])
def test_event_must_be_an_object(data: Any) -> None:
    with pytest.raises(AsyncBookError) as caught:
        parse_event(data)
    assert caught.value.field == "event"


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"state": "done"}, "task.state"),
        ({"attempts": 1.5}, "task.attempts"),
        ({"attempts": "1"}, "task.attempts"),
        ({"maxAttempts": True}, "task.maxAttempts"),
        (
            {"history": [{"version": 1, "event": {"type": "nope", "atMs": 1}}]},
            "task.history.0.event.type",
        ),
    ],
)
def test_bad_tasks_name_the_field(patch: dict[str, Any], field: str) -> None:
    with pytest.raises(AsyncBookError) as caught:
        parse_task({**REFERENCE_TASK, **patch})
    assert caught.value.field == field


def test_models_are_frozen() -> None:
    event = StartEvent(at_ms=1, worker="w")
    with pytest.raises(Exception, match="frozen"):
        event.worker = "x"  # type: ignore[misc]


def test_javascript_trim_set() -> None:
    js_trimmed = "\t\n\x0b\x0c\r \xa0\u1680\u2000\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
    assert is_blank(js_trimmed)
    assert is_blank("")
    for kept in ["\x1c", "\x1f", "\x85", "\u200b", "a"]:
        assert not is_blank(kept)


def test_utf16_order() -> None:
    assert utf16_key("\U0001f600") < utf16_key("\uff61")
    assert "\U0001f600" > "\uff61"
