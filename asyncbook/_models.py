"""Immutable models of tasks, events and results, with the reference's JSON shape.

Python attributes are snake_case; the wire (``parse_event``, ``parse_task``,
``to_wire``) uses the reference's camelCase keys. Event models check only the wire
shape; ranges and integrality are the machine's rules (docs/spec.md order).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    TypeAdapter,
    ValidationError,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from ._jsrules import is_integer, normalize_number
from ._reasons import Reason
from .errors import invalid

__all__ = [
    "TERMINAL_STATES",
    "AsyncEvent",
    "AsyncState",
    "AsyncTask",
    "AsyncTransition",
    "CancelEvent",
    "CallbackResult",
    "DeliveryReceipt",
    "DeliveryResult",
    "ExpireEvent",
    "FailEvent",
    "GroupNotification",
    "AnyNotification",
    "GroupSummary",
    "HistoryEntry",
    "Notification",
    "ProgressEvent",
    "ResumeMode",
    "ResumeResult",
    "STATE_NAMES",
    "StartEvent",
    "SucceedEvent",
    "TaskPage",
    "parse_event",
    "parse_task",
    "to_wire",
]


class AsyncState(StrEnum):
    """Where a task is in its life."""

    QUEUED = "queued"
    """Waiting for a worker: just created, or requeued after a retryable failure."""
    RUNNING = "running"
    """A worker has started an attempt and has not reported its end."""
    SUCCEEDED = "succeeded"
    """Terminal: a result was accepted before the deadline."""
    FAILED = "failed"
    """Terminal: the last attempt failed, or the failure was not retryable."""
    EXPIRED = "expired"
    """Terminal: the deadline passed before a result was accepted."""
    CANCELLED = "cancelled"
    """Terminal (extension): cancelled before it ended, running or not."""


TERMINAL_STATES = frozenset(
    {AsyncState.SUCCEEDED, AsyncState.FAILED, AsyncState.EXPIRED, AsyncState.CANCELLED}
)
STATE_NAMES = tuple(state.value for state in AsyncState)
"""The state names, in lifecycle order (``cancelled``, the extension's, last)."""


def _integral_float(value: float) -> int | float:
    return normalize_number(value)


def _whole_float(value: float) -> int:
    if not is_integer(value):
        raise PydanticCustomError("json_integer", "must be an integer")
    return int(value)


# Ints take pydantic-core's fast path; only floats reach Python, to become ints when
# integral (40.0 is 40, -0.0 is 0). Strict: no bool, no numeric strings.
Number = Annotated[StrictInt | Annotated[StrictFloat, AfterValidator(_integral_float)], Field()]
"""A JSON number: int or float, never bool or str; an integral float becomes an int."""
if TYPE_CHECKING:
    Integer = int
else:
    Integer = Annotated[StrictInt | Annotated[StrictFloat, AfterValidator(_whole_float)], Field()]
    """A JSON integer: an int, or a float with no fractional part (validated to an int)."""


class WireModel(BaseModel):
    """Frozen, camelCase on the wire, snake_case in Python; unknown keys ignored."""

    model_config = ConfigDict(
        frozen=True,
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        extra="ignore",
    )


class StartEvent(WireModel):
    """A worker began an attempt."""

    type: Literal["start"] = "start"
    at_ms: Number
    worker: StrictStr


class ProgressEvent(WireModel):
    """A running attempt reports how far it got; ``cursor`` lives only in the history."""

    type: Literal["progress"] = "progress"
    at_ms: Number
    progress: Number
    cursor: StrictStr


class SucceedEvent(WireModel):
    """A running attempt produced its result."""

    type: Literal["succeed"] = "succeed"
    at_ms: Number
    result_ref: StrictStr
    result_hash: StrictStr


class FailEvent(WireModel):
    """A running attempt failed; ``retryable`` asks for another attempt if one is left."""

    type: Literal["fail"] = "fail"
    at_ms: Number
    error: StrictStr
    retryable: StrictBool


class ExpireEvent(WireModel):
    """The deadline passed (the sweep, or an explicit expiry)."""

    type: Literal["expire"] = "expire"
    at_ms: Number


class CancelEvent(WireModel):
    """Extension: end a queued or running task; ``reason`` (blank: "cancelled") is kept."""

    type: Literal["cancel"] = "cancel"
    at_ms: Number
    reason: StrictStr | None = None


AsyncEvent = Annotated[
    StartEvent | ProgressEvent | SucceedEvent | FailEvent | ExpireEvent | CancelEvent,
    Field(discriminator="type"),
]


class HistoryEntry(WireModel):
    """One recorded change: the version it produced and the event that caused it."""

    version: Integer
    event: AsyncEvent


class AsyncTask(WireModel):
    """The versioned record of one task."""

    id: StrictStr
    state: AsyncState
    expires_at_ms: Number
    attempts: Integer
    max_attempts: Integer
    progress: Number
    version: Integer
    result_ref: StrictStr | None = None
    result_hash: StrictStr | None = None
    error: StrictStr | None = None
    history: tuple[HistoryEntry, ...] = ()

    @property
    def terminal(self) -> bool:
        """True once the task is succeeded, failed or expired."""
        return self.state in TERMINAL_STATES


class AsyncTransition(WireModel):
    """What one event (or expiry) did to a task."""

    task: AsyncTask
    changed: StrictBool
    duplicate: StrictBool
    notify: StrictBool
    reason: Reason


class CallbackResult(AsyncTransition):
    """A transition applied through the book, with callback de-duplication."""

    duplicate_callback: StrictBool

    def transition(self) -> AsyncTransition:
        """The same answer without the callback flag (what ``expire`` returns)."""
        return AsyncTransition(
            task=self.task,
            changed=self.changed,
            duplicate=self.duplicate,
            notify=self.notify,
            reason=self.reason,
        )


ResumeMode = Literal["caught-up", "delta", "snapshot"]


class ResumeResult(WireModel):
    """What a client reconnecting with a version cursor gets."""

    mode: ResumeMode
    events: tuple[HistoryEntry, ...]
    task: AsyncTask


class DeliveryReceipt(WireModel):
    """Proof that a task's result was handed over under an idempotency key."""

    task_id: StrictStr
    result_ref: StrictStr
    result_hash: StrictStr
    idempotency_key: StrictStr
    delivered_at_ms: Number


class DeliveryResult(WireModel):
    """The answer to a delivery request."""

    ok: StrictBool
    duplicate: StrictBool
    reason: Reason
    receipt: DeliveryReceipt | None = None


class TaskPage(WireModel):
    """One page of a listing, newest first; pass ``next_after`` as ``after`` for the next."""

    tasks: tuple[AsyncTask, ...]
    next_after: StrictStr | None = None


class Notification(WireModel):
    """A task reached a terminal state (one per terminal state)."""

    task_id: StrictStr
    state: AsyncState
    at_ms: Number
    version: Integer | None = Field(default=None, exclude=True)
    """The task's version that reached ``state`` (None: not known, an entry written
    before it was kept); not on the wire, where the reference has no such field, but part
    of the notification's ``webhook-id``."""


class GroupSummary(WireModel):
    """A group of tasks (a Celery group or chord header), answered in O(1) (extension).

    ``total`` is the declared size (None until declared); ``members`` how many were
    recorded so far; ``counts`` members per state; ``progress`` the mean of the members'
    progress (over ``total`` once declared); ``ended`` once every declared member ended.
    """

    group_id: StrictStr
    total: Integer | None = None
    members: Integer
    counts: dict[str, Integer]
    progress: Number
    ended: StrictBool


class GroupNotification(WireModel):
    """The last member of a declared group ended (once per group; extension)."""

    group_id: StrictStr
    at_ms: Number
    total: Integer
    counts: dict[str, Integer]
    """Members per terminal state: succeeded, failed, expired, cancelled."""


GROUP_END_STATES = ("succeeded", "failed", "expired", "cancelled")

AnyNotification = Notification | GroupNotification
"""What a sink is handed: a task's notification, or a group's (extension)."""


def group_summary(group_id: str, fields: Mapping[str, int | None]) -> GroupSummary:
    """A ``GroupSummary`` from a group's counters (``total``, ``members``, ``prog``, a count
    per state); the one place the mean progress is computed."""
    total = fields.get("total")
    members = int(fields.get("members") or 0)
    counts = {state: int(fields.get(state) or 0) for state in STATE_NAMES}
    over = total if total else members
    progress = round((fields.get("prog") or 0) / over, 2) if over else 0
    ended = (
        total is not None
        and sum(counts[state] for state in GROUP_END_STATES) >= total
        and members >= total
    )
    return GroupSummary(
        group_id=group_id,
        total=total,
        members=members,
        counts=counts,
        progress=progress,
        ended=ended,
    )


_EVENT_ADAPTER: TypeAdapter[AsyncEvent] = TypeAdapter(AsyncEvent)
_TASK_ADAPTER: TypeAdapter[AsyncTask] = TypeAdapter(AsyncTask)
_Model = TypeVar("_Model")


_EVENT_TYPES = ("start", "progress", "succeed", "fail", "expire", "cancel")
_EVENT_TAGS = frozenset(_EVENT_TYPES)
_NUMBER_BRANCHES = frozenset({"int", "float"})
_INTEGER_FIELDS = frozenset({"attempts", "maxAttempts", "version"})


def _is_integer_field(loc: list[str]) -> bool:
    return bool(loc) and loc[-1] in _INTEGER_FIELDS


def _describe(error: ValidationError, root: str) -> tuple[str, str]:
    first = error.errors(include_url=False)[0]
    loc: list[str] = []
    parent = root
    number_error = False
    for part in (str(part) for part in first["loc"]):
        # Unions put member tags in the path: drop them (event.start.atMs, atMs.int).
        if part in _NUMBER_BRANCHES or part.startswith("function-after"):
            number_error = True
            continue
        if not (part in _EVENT_TAGS and parent == "event"):
            loc.append(part)
        parent = part
    if first["type"] == "union_tag_invalid":
        loc, message = [*loc, "type"], f"must be one of {', '.join(_EVENT_TYPES)}"
    elif first["type"] == "union_tag_not_found":
        loc, message = [*loc, "type"], "is required"
    elif first["type"] == "missing":
        message = "is required"
    elif first["type"] == "json_integer" or (number_error and "int" in first["type"]):
        message = "must be an integer" if _is_integer_field(loc) else "must be a JSON number"
    elif number_error:
        message = "must be a JSON number"
    else:
        message = first["msg"]
    field = ".".join([root, *loc])
    return field, f"{field} {message}"


def _parse(adapter: TypeAdapter[_Model], data: Mapping[str, Any], root: str) -> _Model:
    if not isinstance(data, Mapping):
        raise invalid(f"{root} must be a JSON object", field=root)
    try:
        return adapter.validate_python(dict(data), by_alias=True, by_name=False)
    except ValidationError as error:
        field, message = _describe(error, root)
        raise invalid(message, field=field) from None


def parse_event(data: Mapping[str, Any]) -> AsyncEvent:
    """Read an event in wire format (camelCase keys); ``AsyncBookError`` if malformed."""
    return _parse(_EVENT_ADAPTER, data, "event")


def parse_task(data: Mapping[str, Any]) -> AsyncTask:
    """Read a task in wire format (camelCase keys); ``AsyncBookError`` if malformed."""
    return _parse(_TASK_ADAPTER, data, "task")


def to_wire(model: BaseModel) -> dict[str, Any]:
    """The reference's JSON shape: camelCase keys, absent optional fields omitted."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)
