"""The errors asyncbook raises. Every one has a ``code``, a ``message`` and, where one
value is to blame, the wire name of that ``field``::

    Exception
    └── AsyncBookError               rejected input: "invalid-request" or "conflict"
        ├── UnknownTaskError         "invalid-request", as the reference: the book holds no
        │                            task with that id (field "taskId"; the HTTP API
        │                            answers 404 with the same code)
        ├── BookUnavailableError     "unavailable": the book's store did not answer
        │                            (asyncbook.redis raises RedisUnavailableError, which
        │                            is also a redis-py ConnectionError)
        ├── NotReplicatedError       "unavailable": a write reached fewer replicas than
        │                            the book's ``wait_replicas`` asks (it may still
        │                            have happened on the primary: retry it)
        ├── DamagedRecordError       "damaged": a stored record is incomplete (keys evicted
        │                            or deleted behind the book's back)
        ├── ArtifactError            a stored result (``resultRef``) cannot be read:
        │                            "damaged" (its bytes do not match ``resultHash``),
        │                            "not-found" or "unavailable" (the store's answer)
        └── UnsupportedServerError   "unsupported-server": the book's server cannot run it
                                     (no scripting, or a version below Redis 7.0 / Valkey 8.1)

Input errors say which field is wrong and why (``docs/spec.md``); a rejected call
changes nothing. "unavailable" and "damaged" are server-side failures: nothing the caller
sent was wrong, and a retry with the same callback id or idempotency key is safe.

Every error pickles with its code, message and field (a prefork pool sends a task's
exception to its main process, a result backend stores it): ``args`` are the
arguments of the error's constructor, so ``type(error)(*error.args)`` rebuilds it, as
pickle and Celery's JSON result serializer both do.
"""

from __future__ import annotations

from typing import Literal

ErrorCode = Literal[
    "invalid-request", "conflict", "not-found", "unavailable", "damaged", "unsupported-server"
]

__all__ = [
    "ArtifactError",
    "AsyncBookError",
    "BookUnavailableError",
    "DamagedRecordError",
    "ErrorCode",
    "NotReplicatedError",
    "UnknownTaskError",
    "UnsupportedServerError",
]


class AsyncBookError(Exception):
    """Raised when an input is rejected; ``code`` says why, ``field`` names the culprit."""

    def __init__(self, code: ErrorCode, message: str, field: str | None = None) -> None:
        super().__init__(code, message, field)
        self.code: ErrorCode = code
        self.message = message
        self.field = field

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"


def task_exists(task_id: str) -> AsyncBookError:
    """Build the ``conflict`` error of ``create`` meeting an existing id (a spec deviation)."""
    return AsyncBookError("conflict", f"async-task: task {task_id!r} exists", field="id")


def invalid(message: str, *, field: str | None = None) -> AsyncBookError:
    """Build an ``invalid-request`` error (the reference's ``AiError``)."""
    return AsyncBookError("invalid-request", f"async-task: {message}", field=field)


class UnknownTaskError(AsyncBookError):
    """Raised when a book is asked about a task id it does not hold: code
    ``invalid-request``, as the reference's ``fail()``; the class, ``field`` "taskId" and
    ``task_id`` tell it apart from other bad input."""

    def __init__(self, task_id: str) -> None:
        super().__init__("invalid-request", f"async-task: unknown task {task_id!r}", field="taskId")
        self.args = (task_id,)
        self.task_id = task_id


class BookUnavailableError(AsyncBookError):
    """Raised when the book's store cannot be reached or did not answer in time."""

    def __init__(self, message: str) -> None:
        super().__init__("unavailable", message)
        self.args = (message,)


class NotReplicatedError(AsyncBookError):
    """Raised when WAIT counted fewer replicas (``acknowledged``) than the book's
    ``wait_replicas`` (``wanted``) within ``timeout_ms``: the write is not acknowledged,
    though the primary may hold it; a retry with the same callback id is safe."""

    def __init__(self, wanted: int, acknowledged: int, timeout_ms: int) -> None:
        super().__init__(
            "unavailable",
            f"asyncbook: the write reached {acknowledged} of {wanted} replicas"
            f" within {timeout_ms} ms: not acknowledged",
        )
        self.args = (wanted, acknowledged, timeout_ms)
        self.wanted = wanted
        self.acknowledged = acknowledged
        self.timeout_ms = timeout_ms


class DamagedRecordError(AsyncBookError):
    """Raised when a stored record lacks parts it must have (``task_id`` names it)."""

    def __init__(self, task_id: str, detail: str) -> None:
        super().__init__("damaged", f"async-task: the record of {task_id!r} is damaged: {detail}")
        self.args = (task_id, detail)
        self.task_id = task_id


class ArtifactError(AsyncBookError):
    """Raised when a result stored by reference cannot be read as recorded: ``ref`` names it."""

    def __init__(self, ref: str, detail: str, code: ErrorCode = "damaged") -> None:
        super().__init__(code, f"asyncbook: the result {ref}: {detail}", field="resultRef")
        self.args = (ref, detail, code)
        self.ref = ref
        self.detail = detail


class UnsupportedServerError(AsyncBookError):
    """Raised at a book's first write when its server cannot run the book: ``server``
    names the server found, ``missing`` what it lacks."""

    def __init__(self, server: str, missing: str) -> None:
        super().__init__(
            "unsupported-server",
            f"asyncbook: the book's server ({server}) cannot run the book: {missing}",
        )
        self.args = (server, missing)
        self.server = server
        self.missing = missing
