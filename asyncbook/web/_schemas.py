"""The API's own bodies and parameters as pydantic models, for the route table and the
OpenAPI document (``_openapi``) that is generated from them.

The handlers write their answers from the book's models (``to_wire``); the models here
describe the rest: refusals, request bodies, the envelopes around the book's models,
and each operation's parameters (one model per place: path, header, query).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, create_model
from pydantic.json_schema import SkipJsonSchema

from .._audit import MAX_AUDIT_PAGE, AuditEntry
from .._checks import MAX_PAGE
from .._console import IndexLag, TaskInfo, WorkerSummary
from .._models import STATE_NAMES, AsyncTask, DeliveryResult, GroupSummary, WireModel
from .._queues import MAX_NAMED_QUEUES, MAX_QUEUE_NAME, MAX_QUEUES
from .._reasons import Reason
from ._cancel import MAX_REASON
from ._console_api import DEFAULT_STATS_WINDOW_MS, MAX_PARAMETER
from ._csv_export import CSV_ROWS_LIMIT
from ._groups import GROUP_MEMBERS
from ._sse import MAX_CURSOR

__all__ = [
    "MOMENT",
    "AuditList",
    "AuditQuery",
    "CancelRefusal",
    "CancelRequest",
    "ReasonText",
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
    "or_empty",
    "reason_body",
]

_STATES: dict[str, Any] = {"enum": list(STATE_NAMES)}
_STATE_FILTER: dict[str, Any] = {"enum": ["", *STATE_NAMES]}
"""A state parameter: one state, or empty (as if absent: every state)."""
_SORT_PATTERN = (
    "^(|newest|oldest|-?(created|started|ended|runtime|attempts|name)"
    "|(created|started|ended|runtime|attempts|name):(asc|desc))$"
)
_WINDOW: dict[str, Any] = {
    "pattern": "^(\\s*(([1-9][0-9]{0,2}|1[0-3][0-9]{2}|14[0-3][0-9]|1440)m|([1-9]|1[0-9]|2[0-4])h"
    "|1d)\\s*)?$"
}
"""A stats window: minutes, hours or 1d, from 1m to 24h (the server reads any duration of
that range, ``parse_duration``); empty: absent."""
_WITHIN: dict[str, Any] = {
    "pattern": "^(\\s*([1-9][0-9]{0,7}(ms)?|[1-9][0-9]{0,4}s|[1-9][0-9]{0,3}m"
    "|([1-9][0-9]?|1[0-5][0-9]|16[0-8])h|[1-7]d)\\s*)?$"
}
"""How recently a worker was seen, up to 7d (the server reads any duration from 1 ms to
7d, ``parse_duration``); empty: absent."""
_ISO_TIME = (
    "(197[1-9]|19[89][0-9]|[2-9][0-9]{3})-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])"
    "([T ]([01][0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9](\\.[0-9]{1,6})?)?"
    "(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])?)?"
)
MOMENT: dict[str, Any] = {
    "pattern": f"^(\\s*([0-9]{{1,15}}|[0-9]{{1,12}}(ms|s|m|h|d)|{_ISO_TIME})\\s*)?$"
}
"""A moment as ``parse_moment`` reads it: ms since the epoch, a duration ago, or an ISO
8601 time (this pattern: from 1971, days 1 to 28; the server reads any ISO 8601 time
from 1970 on); empty: absent."""
_NOT_BLANK: dict[str, Any] = {"pattern": "\\S"}
"""Not empty nor only whitespace (as JavaScript's ``trim`` counts it)."""
_NO_CONTROL = "^[^\\x00-\\x1f\\x7f]*$"
_COUNT_CURSOR: dict[str, Any] = {"pattern": "^[0-9]*$"}


def or_empty(schema: dict[str, Any]) -> None:
    """A count parameter's schema, the empty string allowed too (as if absent): its
    bounds hold for a number, ``maxLength`` 0 for a string."""
    schema["type"] = [schema.get("type", "integer"), "string"]
    schema["maxLength"] = 0


def _text(description: str) -> Any:
    """An optional text of at most ``MAX_PARAMETER`` characters; empty: as if absent."""
    return Field(None, max_length=MAX_PARAMETER, description=description + " Empty: as if absent.")


def _limit(default: int, description: str, most: int = MAX_PAGE) -> Any:
    """A count from 1 to ``most``; empty: as if absent (``default``)."""
    return Field(
        default,
        ge=1,
        le=most,
        description=description + " Empty: as if absent.",
        json_schema_extra=or_empty,
    )


def _duration(description: str, pattern: dict[str, Any]) -> Any:
    """A duration (``90s``, ``10m``...) that ``pattern`` bounds; empty: as if absent."""
    return Field(None, description=description + " Empty: as if absent.", json_schema_extra=pattern)


_MOMENT_HELP = (
    "ms since the epoch, a duration ago (`10m`, `2h`, `1d`: now minus that) or an ISO-8601 "
    "time (UTC unless it names an offset). Empty: as if absent."
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


ReasonText = Annotated[
    str | None, WithJsonSchema({"type": ["string", "null"], "maxLength": MAX_REASON})
]
"""A change's optional ``reason`` in a request body: text of at most ``MAX_REASON``
characters, or null (``cancel_reason`` reads it)."""


def reason_body(name: str, doc: str, why: str, module: str = __name__) -> type[BaseModel]:
    """A change's optional body, for the API document: ``reason`` only (``ReasonText``;
    ``why`` says what becomes of it), nothing else; its handler reads it."""
    return create_model(
        name,
        __config__=ConfigDict(extra="forbid"),
        __doc__=doc,
        __module__=module,
        reason=(Annotated[ReasonText, Field(description=why)], None),
    )


CancelRequest = reason_body(
    "CancelRequest",
    "``POST /api/tasks/<id>/cancel``'s optional body.",
    "Why, kept as the task's `error` (absent, null or blank: `cancelled`).",
)


class Extension:
    """Marks a model documented as ``allOf``: its first base, then the fields it adds."""


class Download(WireModel):
    """A URL anyone holding it may read the delivered result from, until ``expiresAtMs``
    (a presigned URL of the server's S3 artifact store)."""

    url: str
    expires_at_ms: int


class DeliveryAnswer(DeliveryResult, Extension):
    """A delivery: the receipt as the book gives it, and beside it, when the result is
    stored by reference in an S3 store of the server's, a presigned URL to read it."""

    download: Download | Absent = None


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
    index_lag: IndexLag | Absent = Field(
        None,
        description=(
            "With a console: how far behind the index the page was read from stayed "
            "(changes not applied yet, the oldest's age in ms; `entries` 0 alone when caught up)."
        ),
    )


class WorkerList(BaseModel):
    """The workers, most recently seen first."""

    workers: list[WorkerSummary]


class AuditList(BaseModel):
    """Audit entries, newest first."""

    entries: list[AuditEntry]


class AuditQuery(BaseModel):
    since: str | Absent = Field(
        None, description="Entries at or after: " + _MOMENT_HELP, json_schema_extra=MOMENT
    )
    limit: int = _limit(100, "At most this many entries.", MAX_AUDIT_PAGE)


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
            "in the query after an empty segment: ``/api/groups//stream?id=..``); not blank."
        ),
        json_schema_extra=_NOT_BLANK,
    )


class ListingQuery(BaseModel):
    state: str | Absent = Field(
        None,
        description="Only tasks in this state (all when absent or empty).",
        json_schema_extra=_STATE_FILTER,
    )
    limit: int = _limit(50, "Page size.")
    after: str | Absent = Field(
        None, description="The previous page's `nextAfter`.", json_schema_extra=_COUNT_CURSOR
    )


class SearchQuery(BaseModel):
    """A search (``/api/search``; ``/api/tasks`` with a console)."""

    name: str | Absent = _text("Only tasks of this Celery task name.")
    state: str | Absent = Field(
        None,
        description="Only tasks in this state (all when absent or empty).",
        json_schema_extra=_STATE_FILTER,
    )
    worker: str | Absent = _text("Only tasks run by this worker.")
    q: str | Absent = _text(
        "The search box: tasks whose id starts with this, whose name contains it (any "
        "case, over the names the book knows), or whose args, kwargs, exception, "
        "traceback or error contain it (any case; a scan of at most 5,000 tasks per "
        "page, `scanComplete` false when it stopped there: `nextAfter` continues it). "
        "Each row says `matchedBy` (`id`, `name`, `text`); `matched` counts them."
    )
    since: str | Absent = Field(
        None, description="Created at or after: " + _MOMENT_HELP, json_schema_extra=MOMENT
    )
    until: str | Absent = Field(
        None, description="Created at or before: " + _MOMENT_HELP, json_schema_extra=MOMENT
    )
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

    limit: int = _limit(CSV_ROWS_LIMIT, "Most rows in this download.", CSV_ROWS_LIMIT)


class WorkersQuery(BaseModel):
    within: str | Absent = _duration(
        "Seen within this long (`90s`, `10m`, `1h`, `1d`; at most 7d); default 1d.", _WITHIN
    )


class StatsQuery(BaseModel):
    name: str | Absent = _text("One task name (every name when absent).")
    window: str | Absent = _duration(
        f"How far back, from 1m to 24h (default {DEFAULT_STATS_WINDOW_MS} ms, 1h).", _WINDOW
    )


class QueuesQuery(BaseModel):
    queue: (
        list[Annotated[str, Field(min_length=1, max_length=MAX_QUEUE_NAME, pattern=_NO_CONTROL)]]
        | Absent
    ) = Field(
        None,
        max_length=MAX_NAMED_QUEUES,
        description=(
            "A queue to show besides those found (repeatable, at most "
            f"{MAX_NAMED_QUEUES}; no control characters)."
        ),
    )
    limit: int = _limit(MAX_QUEUES, "Most queues listed.", MAX_QUEUES)


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
