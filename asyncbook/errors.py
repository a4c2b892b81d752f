"""The one error type asyncbook raises for rejected input."""

from __future__ import annotations

from typing import Literal

ErrorCode = Literal["invalid-request", "conflict"]

__all__ = ["AsyncBookError", "ErrorCode", "UnknownTaskError"]


class AsyncBookError(Exception):
    """Raised when an input is rejected; ``code`` says why, ``field`` names the culprit."""

    def __init__(self, code: ErrorCode, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.code: ErrorCode = code
        self.message = message
        self.field = field

    def __repr__(self) -> str:
        return f"AsyncBookError(code={self.code!r}, message={self.message!r})"


def task_exists(task_id: str) -> AsyncBookError:
    """Build the ``conflict`` error of ``create`` meeting an existing id (SPEC deviation)."""
    return AsyncBookError("conflict", f"async-task: task {task_id!r} exists", field="id")


def invalid(message: str, *, field: str | None = None) -> AsyncBookError:
    """Build an ``invalid-request`` error (the reference's ``AiError``)."""
    return AsyncBookError("invalid-request", f"async-task: {message}", field=field)


class UnknownTaskError(AsyncBookError):
    """Raised when a book is asked about a task id it does not hold."""

    def __init__(self, task_id: str) -> None:
        super().__init__("invalid-request", f"async-task: unknown task {task_id!r}", field="taskId")
        self.task_id = task_id
