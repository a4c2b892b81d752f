"""The queues report: a broker read beside the book's side (the oldest messages' ages, the
sweep's health), the broker's URL shown without its password, queue names checked."""

from __future__ import annotations

from typing import Any

import pytest

from asyncbook import AsyncBookError, SweepHealth
from asyncbook._queues import (
    MAX_AGE_LOOKUPS,
    BrokerSnapshot,
    OldestMessage,
    QueueSnapshot,
    broker_state,
    checked_queue_name,
    oldest_task_ids,
    queues_report,
    read_broker,
    shown_url,
)

NOW = 1_000_000
HEALTH = SweepHealth(now_ms=NOW, last_sweep_ms=NOW - 500, overdue=0)


def _report(queues: list[QueueSnapshot], created: dict[str, float | None]) -> dict[str, Any]:
    snapshot = BrokerSnapshot(queues=queues)
    report = queues_report(snapshot, broker_state(None), HEALTH, created, own_queue="own")
    return {row["name"]: row for row in report.to_wire()["queues"]}


def test_the_oldest_of_the_sub_queues_is_aged_by_the_book_or_a_timestamp() -> None:
    queue = QueueSnapshot(
        name="q",
        ready=3,
        oldest=(
            OldestMessage(task_id="young"),
            OldestMessage(task_id="stamped", sent_ms=NOW - 9_000),
            OldestMessage(task_id="old"),
        ),
    )
    row = _report([queue], {"young": NOW - 1_000, "old": NOW - 5_000})["q"]
    assert (row["oldestTaskId"], row["oldestAgeMs"], row["oldestNote"]) == ("stamped", 9_000, None)


@pytest.mark.parametrize(
    ("queue", "created", "note"),
    [
        (QueueSnapshot(name="q", ready=0), {}, "no message waiting"),
        (QueueSnapshot(name="q", ready=2, oldest_note="cannot peek"), {}, "cannot peek"),
        (
            QueueSnapshot(name="q", ready=1, oldest=(OldestMessage(note="not JSON"),)),
            {},
            "not JSON",
        ),
        (
            QueueSnapshot(name="q", ready=1, oldest=(OldestMessage(task_id="t"),)),
            {"t": None},
            "an untracked task (not in the book)",
        ),
        (
            QueueSnapshot(name="q", ready=1, oldest=(OldestMessage(task_id="t"),)),
            {},
            f"not looked up (the first {MAX_AGE_LOOKUPS} queues' only)",
        ),
    ],
)
def test_no_age_says_why(queue: QueueSnapshot, created: dict[str, float | None], note: str) -> None:
    row = _report([queue], created)["q"]
    assert (row["oldestAgeMs"], row["oldestNote"]) == (None, note)


def test_at_most_so_many_tasks_are_looked_up_each_once() -> None:
    queues = [
        QueueSnapshot(name=f"q{n}", ready=1, oldest=(OldestMessage(task_id=f"t{n % 100}"),))
        for n in range(200)
    ]
    stamped = QueueSnapshot(name="s", ready=1, oldest=(OldestMessage("x", sent_ms=NOW),))
    ids = oldest_task_ids(BrokerSnapshot(queues=[stamped, *queues]))
    assert ids == [f"t{n}" for n in range(MAX_AGE_LOOKUPS)]


def test_no_broker_still_reports_asyncbooks_side() -> None:
    snapshot, state = read_broker(None, [], "own", 200)
    report = queues_report(snapshot, state, HEALTH, {}, own_queue="own").to_wire()
    assert report["broker"]["configured"] is False
    assert report["queues"] == []
    assert report["asyncbook"] == {"queue": "own", "ready": None, "health": HEALTH.to_wire()}


def test_the_url_is_shown_without_its_password() -> None:
    assert shown_url("redis://:pw@host:6379/0") == "redis://:***@host:6379/0"
    assert shown_url("amqp://user:pw@host//") == "amqp://user:***@host//"
    assert shown_url("redis://host:6379/0") == "redis://host:6379/0"


@pytest.mark.parametrize("name", ["", "x" * 201, "a\nb", "a\x00b", "tab\there"])
def test_a_queue_name_is_checked(name: str) -> None:
    with pytest.raises(AsyncBookError) as caught:
        checked_queue_name(name)
    assert caught.value.field == "queue"
