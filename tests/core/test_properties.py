"""Invariants over random event sequences (hypothesis)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings

from asyncbook import (
    TERMINAL_STATES,
    MemoryBook,
    ProgressEvent,
    StartEvent,
    apply_async_event,
    create_async_task,
)

from ..support.operations import TASK_IDS, run_operation, sequences


def life(ops: list[tuple[Any, ...]]) -> tuple[MemoryBook, list[Any], list[dict[str, Any]]]:
    book = MemoryBook()
    snapshots: list[Any] = []
    notes: list[dict[str, Any]] = []
    for op in [*ops, ("drain",)]:
        outcome = run_operation(book, op)
        if op[0] == "drain":
            notes.extend(outcome)
        snapshots.append({task_id: book.get(task_id) for task_id in TASK_IDS})
    return book, snapshots, notes


@settings(max_examples=300, deadline=None)
@given(sequences)
def test_versions_contiguous_from_one(ops: list[tuple[Any, ...]]) -> None:
    book, _, _ = life(ops)
    for task_id in TASK_IDS:
        task = book.get(task_id)
        if task is not None:
            assert [entry.version for entry in task.history] == list(range(1, task.version + 1))


@settings(max_examples=300, deadline=None)
@given(sequences)
def test_terminal_states_are_absorbing(ops: list[tuple[Any, ...]]) -> None:
    _, snapshots, _ = life(ops)
    for task_id in TASK_IDS:
        ended = None
        for snapshot in snapshots:
            task = snapshot[task_id]
            if ended is not None:
                assert task == ended
            elif task is not None and task.state in TERMINAL_STATES:
                ended = task


@settings(max_examples=300, deadline=None)
@given(sequences)
def test_at_most_one_notification_per_terminal_task(ops: list[tuple[Any, ...]]) -> None:
    book, _, notes = life(ops)
    ids = [note["taskId"] for note in notes]
    assert len(ids) == len(set(ids))
    for note in notes:
        task = book.get(note["taskId"])
        assert task is not None
        assert note["state"] == task.state


@settings(max_examples=300, deadline=None)
@given(sequences)
def test_progress_never_decreases_within_an_attempt(ops: list[tuple[Any, ...]]) -> None:
    book, _, _ = life(ops)
    for task_id in TASK_IDS:
        task = book.get(task_id)
        if task is None:
            continue
        last = 0
        for entry in task.history:
            if isinstance(entry.event, StartEvent):
                last = 0
            elif isinstance(entry.event, ProgressEvent):
                assert entry.event.progress > last
                last = int(entry.event.progress)


@settings(max_examples=300, deadline=None)
@given(sequences)
def test_replaying_history_reproduces_the_task(ops: list[tuple[Any, ...]]) -> None:
    book, _, _ = life(ops)
    for task_id in TASK_IDS:
        task = book.get(task_id)
        if task is None:
            continue
        replay = create_async_task(
            id=task_id, now_ms=0, ttl_ms=task.expires_at_ms, max_attempts=task.max_attempts
        )
        for entry in task.history:
            result = apply_async_event(replay, entry.event)
            assert result.changed
            replay = result.task
        assert replay == task
