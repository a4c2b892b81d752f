"""Helpers for the Celery integration tests: in-process apps and a counting book."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from asyncbook import ApplyItem, AsyncTask, RedisBook


class CountingBook(RedisBook):
    """A RedisBook that counts its round trips, by method."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[str] = []

    def create(self, **kwargs: Any) -> AsyncTask:
        self.calls.append("create")
        return super().create(**kwargs)

    def apply(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append("apply")
        return super().apply(*args, **kwargs)

    def apply_many(self, items: Iterable[ApplyItem], **kwargs: Any) -> Any:
        self.calls.append("apply_many")
        return super().apply_many(items, **kwargs)

    def expire(self, task_id: str) -> Any:
        self.calls.append("expire")
        return super().expire(task_id)


def wait_for(condition: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02) -> Any:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(interval)


def wait_terminal(book: RedisBook, task_id: str, timeout: float = 15.0) -> AsyncTask:
    """The task once it is terminal."""

    def ended() -> AsyncTask | None:
        task = book.get(task_id)
        return task if task is not None and task.terminal else None

    result: AsyncTask = wait_for(ended, timeout)
    return result


def unique(prefix: str) -> str:
    """A name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def history(task: AsyncTask) -> list[str]:
    """The event types of a task's history, in order."""
    return [entry.event.type for entry in task.history]
