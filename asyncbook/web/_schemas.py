"""The API's own bodies and parameters as pydantic models, for the route table and the
OpenAPI document (``_openapi``) that is generated from them.

The handlers write their answers from the book's models (``to_wire``); the models here
describe the rest: refusals, request bodies, the envelopes around the book's models,
and each operation's parameters (one model per place: path, header, query).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema
from pydantic.json_schema import SkipJsonSchema

from .._audit import MAX_AUDIT_PAGE, AuditEntry
from .._checks import MAX_PAGE
from .._console import TaskInfo, WorkerSummary
from .._models import STATE_NAMES, AsyncTask, GroupSummary, WireModel
from .._queues import MAX_NAMED_QUEUES, MAX_QUEUE_NAME, MAX_QUEUES
from .._reasons import Reason
from ._cancel import MAX_REASON
from ._console_api import DEFAULT_STATS_WINDOW_MS, MAX_PARAMETER
from ._csv_export import CSV_ROWS_LIMIT
from ._groups import GROUP_MEMBERS
from ._sse import MAX_CURSOR

__all__ = [
    "AuditList",
    "AuditQuery",
    "CancelRefusal",
    "CancelRequest",
    "CursorQuery",
    "DeliveryHeaders",
    "Error",
    "Forbidden",
    "GroupDetail",
    "GroupIdPath",
    "GroupQuery",
    "ListingQuery",
    "LoginForm",
    "NameList",
    "SearchCsvQuery",
    "QueuesQuery",
    "SearchQuery",
    "StatsQuery",
    "StreamHeaders",
    "TaskIdPath",
    "TaskList",
    "TaskWithInfo",
    "WorkerList",
    "WorkersQuery",
]

_STATES: dict[str, Any] = {"enum": list(STATE_NAMES)}
_SORT_PATTERN = (
    "^(newest|oldest|-?(created|started|ended|runtime|attempts|name)"
    "|(created|started|ended|runtime|attempts|name):(asc|desc))$"
)
_DURATION: dict[str, Any] = {"pattern": "^[0-9]{1,12}(ms|s|m|h|d)?$"}
_MOMENT_HELP = (
    "ms since the epoch, a duration ago (`10m`, `2h`, `1d`: now minus that) or an ISO-8601 "
    "time (UTC unless it names an offset)."
)
Absent = SkipJsonSchema[None]
"""A value that may be left out but is never ``null``."""


# -- bodies ------------------------------------------------------------------------------------


class Error(BaseModel):
    """Every refusal: a ``code``, a ``message``, and the ``field`` to blame when one is."""

    code: str
    message: str
    field: str | Absent = None


class CancelRefusal(BaseModel):
    """A cancel that did not happen: the task had ended, or expired."""

    code: str = Field(
        json_schema_extra={"enum": [str(Reason.TERMINAL_CONFLICT), str(Reason.EXPIRED)]}
    )
    message: str
    state: str = Field(
        description="The state the task is in (it ended otherwise, or expired).",
        json_schema_extra=_STATES,
    )


class CancelRequest(BaseModel):
    """``POST /api/tasks/<id>/cancel``'s optional body."""

    model_config = ConfigDict(extra="forbid")

    reason: Annotated[
        str | None,
        WithJsonSchema({"type": ["string", "null"], "maxLength": MAX_REASON}),
        Field(description="Why, kept as the task's `error` (absent, null or blank: `cancelled`)."),
    ] = None


class Extension:
    """Marks a model documented as ``allOf``: its first base, then the fields it adds."""


class GroupDetail(GroupSummary, Extension):
    """A group's summary and its first members."""

    tasks: tuple[AsyncTask, ...] = Field(
        description=(
            "The first members in creation order (`limit` of them at most), "
            "without history; `members` counts them all."
        )
    )


class TaskWithInfo(AsyncTask, Extension):
    """A task and its info (a book that keeps task info)."""

    info: TaskInfo


class TaskList(WireModel):
    """One page of a listing (tasks without history)."""

    model_config = ConfigDict(title="TaskPage")

    tasks: list[AsyncTask]
    next_after: str | Absent = Field(None, description="Pass as ``after`` for the next page.")


class WorkerList(BaseModel):
    """The workers, most recently seen first."""

    workers: list[WorkerSummary]


class AuditList(BaseModel):
    """Audit entries, newest first."""

    entries: list[AuditEntry]


class AuditQuery(BaseModel):
    since: str | Absent = Field(None, description="Entries at or after: " + _MOMENT_HELP)
    limit: int = Field(100, ge=1, le=MAX_AUDIT_PAGE, description="At most this many entries.")


class Forbidden(BaseModel):
    """A change asked for by a principal with the read role."""

    code: str = Field(json_schema_extra={"enum": ["forbidden", "cross-site"]})
    message: str
    role: str | Absent = Field(None, description="The role the change needs: `operator`.")


class NameList(BaseModel):
    """Task names, sorted."""

    names: list[str]


class LoginForm(BaseModel):
    """The sign-in form."""

    token: str
    next: str | Absent = Field(None, description="A path on this site to go to")


# -- parameters --------------------------------------------------------------------------------


class TaskIdPath(BaseModel):
    id: str = Field(description="The task id, percent-encoded (``/`` as ``%2F``).")


class GroupIdPath(BaseModel):
    id: str = Field(
        description=(
            "The group id, percent-encoded like a task id (``/`` as ``%2F``; ``.`` and ``..`` "
            "in the query after an empty segment: ``/api/groups//stream?id=..``)."
        )
    )


def _text(description: str) -> Any:
    return Field(None, min_length=1, max_length=MAX_PARAMETER, description=description)


def _limit(default: int, description: str) -> Any:
    return Field(default, ge=1, le=MAX_PAGE, description=description)


class ListingQuery(BaseModel):
    state: str | Absent = Field(
        None,
        description="Only tasks in this state (all when absent or empty).",
        json_schema_extra=_STATES,
    )
    limit: int = _limit(50, "Page size.")
    after: str | Absent = Field(None, description="The previous page's `nextAfter`.")


class SearchQuery(BaseModel):
    """A search (``/api/search``; ``/api/tasks`` with a console)."""

    name: str | Absent = _text("Only tasks of this Celery task name.")
    state: str | Absent = Field(
        None, description="Only tasks in this state.", json_schema_extra=_STATES
    )
    worker: str | Absent = _text("Only tasks run by this worker.")
    q: str | Absent = _text(
        "The search box: tasks whose id starts with this, whose name contains it (any "
        "case, over the names the book knows), or whose args, kwargs, exception, "
        "traceback or error contain it (any case; a scan of at most 5,000 tasks per "
        "page, `scanComplete` false when it stopped there: `nextAfter` continues it). "
        "Each row says `matchedBy` (`id`, `name`, `text`); `matched` counts them."
    )
    since: str | Absent = Field(None, description="Created at or after: " + _MOMENT_HELP)
    until: str | Absent = Field(None, description="Created at or before: " + _MOMENT_HELP)
    sort: str = Field(
        "newest",
        description=(
            "Over all matches: `created`, `started`, `ended`, `runtime`, `attempts` or "
            "`name`, ascending, or descending with a `-` prefix (`-runtime`); `field:asc` "
            "and `field:desc` too. `newest` and `oldest` are `-created` and `created`. "
            "Ties come in task id order (by name: by creation); tasks without the field "
            "(a queued task's runtime) come last in both directions, by creation. "
            "Anything else is a 400."
        ),
        json_schema_extra={"pattern": _SORT_PATTERN},
    )
    limit: int = _limit(50, "Page size.")
    after: str | Absent = Field(None, description="The previous page's `nextAfter`.")


class SearchCsvQuery(SearchQuery):
    """A search downloaded as CSV (``/api/search.csv``): ``/api/search``'s parameters."""

    limit: int = Field(
        CSV_ROWS_LIMIT, ge=1, le=CSV_ROWS_LIMIT, description="Most rows in this download."
    )


class WorkersQuery(BaseModel):
    within: str | Absent = Field(
        None,
        description="Seen within this long (`90s`, `10m`, `1h`, `1d`; at most 7d); default 1d.",
        json_schema_extra=_DURATION,
    )


class StatsQuery(BaseModel):
    name: str | Absent = _text("One task name (every name when absent).")
    window: str | Absent = Field(
        None,
        description=f"How far back, from 1m to 24h (default {DEFAULT_STATS_WINDOW_MS} ms, 1h).",
        json_schema_extra=_DURATION,
    )


class QueuesQuery(BaseModel):
    queue: list[Annotated[str, Field(min_length=1, max_length=MAX_QUEUE_NAME)]] | Absent = Field(
        None,
        max_length=MAX_NAMED_QUEUES,
        description=(
            "A queue to show besides those found (repeatable, at most "
            f"{MAX_NAMED_QUEUES}; no control characters)."
        ),
    )
    limit: int = Field(MAX_QUEUES, ge=1, le=MAX_QUEUES, description="Most queues listed.")


class CursorQuery(BaseModel):
    cursor: int = Field(0, ge=0, le=MAX_CURSOR)


class StreamHeaders(BaseModel):
    last_event_id: Annotated[int, Field(ge=0, le=MAX_CURSOR)] | Absent = Field(
        None, alias="Last-Event-ID"
    )


class DeliveryHeaders(BaseModel):
    idempotency_key: str = Field(
        alias="Idempotency-Key",
        min_length=1,
        pattern="\\S",
        description=(
            "Names this delivery: the same key gives the same receipt again, and is refused "
            "(409) for another task. Sent as UTF-8 bytes (400 when they are not UTF-8); "
            "not blank."
        ),
        examples=["order-7"],
    )


class GroupQuery(BaseModel):
    limit: int = _limit(GROUP_MEMBERS, "How many members to list.")
