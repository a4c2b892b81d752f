"""What a watcher of one task is sent, whoever serves it (status server, CLI).

A watcher that has seen version ``cursor`` is sent what docs/spec.md's resume gives it: the
history entries it lacks (``change``) then the task without its history (``task``), or
the whole task (``snapshot``) when it is too far behind; ``end`` once the task is
terminal. The status server's streams and ``asyncbook watch`` send the same messages;
the followers live in ``asyncbook.redis`` (the change channel) and ``asyncbook.cli``
(a status server's stream).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._book import AsyncBook
from ._models import AsyncTask, ResumeResult, to_wire

__all__ = [
    "Message",
    "messages_for",
    "resume_light",
    "task_summary",
]


@dataclass(frozen=True)
class Message:
    """One message to a watcher: its name, its version (the SSE ``id:``) and JSON data."""

    event: str
    id: int | None
    data: dict[str, Any]


def task_summary(task: AsyncTask) -> dict[str, Any]:
    """The task's wire shape without its history."""
    wire = to_wire(task)
    wire.pop("history", None)
    return wire


def messages_for(result: ResumeResult, cursor: int, fresh: bool) -> list[Message]:
    """What a watcher at ``cursor`` is sent, from a resume made at or below its cursor.

    ``fresh`` (a watcher that was sent nothing yet) gets the task even when caught up.
    """
    task = result.task
    if task.version <= cursor:
        batch = [Message("task", task.version, task_summary(task))] if fresh else []
    elif result.mode == "snapshot":
        batch = [Message("snapshot", task.version, to_wire(task))]
    else:
        batch = [
            Message("change", e.version, to_wire(e)) for e in result.events if e.version > cursor
        ]
        batch.append(Message("task", task.version, task_summary(task)))
    if task.terminal and (batch or fresh):
        batch.append(Message("end", None, {"state": task.state.value, "version": task.version}))
    return batch


def resume_light(book: AsyncBook, task_id: str, cursor: int) -> ResumeResult:
    """``book.resume`` without the history in caught-up and delta answers (O(new events))."""
    return book.resume(task_id, cursor, full_task=False)
