"""What the operator console reads: task info, searches, workers and per-minute stats.

These models sit beside the seed's ``AsyncTask`` and never change it: a task's info
(Celery name, arguments, queue, worker, times, traceback) is kept in the task's Redis
record by the same scripts that write the task, and read with ``RedisBook.info``,
``RedisBook.search``, ``RedisBook.workers`` and ``RedisBook.stats``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Literal, NamedTuple, Protocol, runtime_checkable

from pydantic import Field, StrictInt, StrictStr

from ._fleet import WorkerRecord
from ._models import STATE_NAMES, AsyncTask, Number, WireModel
from .errors import invalid

__all__ = [
    "DEFAULT_REDACT",
    "INFO_LIMIT",
    "MAX_CURSOR_LENGTH",
    "RUNTIME_BUCKETS_MS",
    "SORT_FIELDS",
    "SORT_HELP",
    "STATS_MINUTE_MS",
    "STATS_WINDOW_MS",
    "TEXT_LIMIT",
    "TRACE_LIMIT",
    "IndexLag",
    "IndexedBook",
    "MinuteStats",
    "NameTotals",
    "PublishInfo",
    "SearchPage",
    "SearchRow",
    "SortOrder",
    "TaskInfo",
    "TaskQuery",
    "TaskStats",
    "WorkerSummary",
    "matched_counts",
    "percentile_ms",
    "sort_order",
]

INFO_LIMIT = 512
"""Default length (characters) the Celery integration truncates args and kwargs to."""

TEXT_LIMIT = 4096
"""The longest info text the book stores (the Celery integration keeps a traceback's end)."""

TRACE_LIMIT = 512
"""The longest trace context (``PublishInfo.trace``) the book stores."""

DEFAULT_REDACT = ("password", "passwd", "secret", "token", "api_key", "apikey", "authorization")
"""Keyword arguments masked by default (by name, case-insensitive)."""

STATS_MINUTE_MS = 60_000
"""Stats are kept per minute."""

STATS_WINDOW_MS = 24 * 3_600_000
"""How far back stats reach (their keys expire after a day and an hour)."""

RUNTIME_BUCKETS_MS = (
    100,
    250,
    500,
    1_000,
    2_500,
    5_000,
    10_000,
    30_000,
    60_000,
    120_000,
    300_000,
    600_000,
    1_800_000,
    3_600_000,
)
"""Upper bounds of the runtime histogram's buckets; a last bucket holds the rest."""


@dataclass(frozen=True)
class PublishInfo:
    """What the publisher knows of a task, recorded with its create (``CreateSpec.info``).

    ``args`` and ``kwargs`` are already rendered (repr, truncated, redacted); ``None``
    leaves a field out.
    """

    name: str | None = None
    args: str | None = None
    kwargs: str | None = None
    queue: str | None = None
    parent_id: str | None = None
    root_id: str | None = None
    message: str | None = dataclass_field(default=None, repr=False)
    """The message as published (``KeptMessage.to_json``), kept to send it again (a resend);
    never shown by any read."""
    trace: str | None = dataclass_field(default=None, repr=False)
    """The publish's W3C trace context (``traceparent``, then a newline and ``tracestate``
    if any; at most ``TRACE_LIMIT`` characters) with ``asyncbook_tracing``: the trace an
    end no worker sees is recorded in (docs/tracing.md); never shown by any read."""


class TaskInfo(WireModel):
    """A task's info: what Celery published and what its executions reported."""

    id: StrictStr
    name: StrictStr | None = None
    args_repr: StrictStr | None = Field(default=None, alias="args")
    kwargs_repr: StrictStr | None = Field(default=None, alias="kwargs")
    queue: StrictStr | None = None
    parent_id: StrictStr | None = None
    root_id: StrictStr | None = None
    group_id: StrictStr | None = None
    worker: StrictStr | None = None
    created_at_ms: Number | None = None
    started_at_ms: Number | None = None
    ended_at_ms: Number | None = None
    runtime_ms: Number | None = None
    retries: StrictInt | None = None
    exception: StrictStr | None = None
    traceback: StrictStr | None = None
    children: tuple[StrictStr, ...] = ()
    retry_of: StrictStr | None = None
    """The task this one sends again (a resend's new task; the stored name of the link,
    kept from when a resend was called a retry)."""
    retried_as: StrictStr | None = None
    """The task that sends this one again (once resent)."""
    retried_by: StrictStr | None = None
    """Who asked for the resend (a resend's new task; None when not said)."""
    retry_reason: StrictStr | None = None
    """Why, as they said (a resend's new task)."""
    message_kept: bool = False
    """Its message as published is kept (``asyncbook_keep_messages``): a resend can send it
    again. The message itself is never shown."""


class SearchRow(WireModel):
    """One task of a search: the task (without its history) and its info."""

    task: AsyncTask
    info: TaskInfo
    matched_by: Literal["id", "name", "text"] | None = None
    """How the query's ``q`` matched the task: an id prefix, its name, its text."""


SORT_FIELDS = ("created", "started", "ended", "runtime", "attempts", "name")
"""What a search can sort by, over all its matches (``-field``: descending)."""

SORT_HELP = (
    "sort must be created, started, ended, runtime, attempts or name, ascending or with a "
    "'-' prefix descending (also field:asc, field:desc); newest and oldest mean "
    "-created and created"
)

MAX_CURSOR_LENGTH = 16_384
"""The longest ``after`` a search accepts (a sort value and a task id, or a name; the
status server reads request heads of up to 64 KiB)."""


class SortOrder(NamedTuple):
    """A search's order: a field of ``SORT_FIELDS`` and its direction."""

    field: str
    descending: bool

    @property
    def spelling(self) -> str:
        """The canonical spelling: ``-runtime``, ``runtime``."""
        return ("-" if self.descending else "") + self.field


def sort_order(text: object) -> SortOrder:
    """The order ``text`` names (``runtime``, ``-runtime``, ``runtime:desc``, ``newest``),
    or ``AsyncBookError`` (``invalid``, field ``sort``) listing what is accepted."""
    if not isinstance(text, str):
        raise invalid(SORT_HELP, field="sort")
    if text in ("newest", "oldest"):
        return SortOrder("created", text == "newest")
    field, colon, direction = text.partition(":")
    descending = direction == "desc"
    if colon and direction not in ("asc", "desc"):
        raise invalid(SORT_HELP, field="sort")
    if not colon and field.startswith("-"):
        field, descending = field[1:], True
    if field not in SORT_FIELDS:
        raise invalid(SORT_HELP, field="sort")
    return SortOrder(field, descending)


def _digits(text: str, most: int = 16) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= most


def _cursor_ok(after: object, field: str) -> bool:
    """Whether ``after`` is a cursor a page of a search sorted by ``field`` could have
    given: by creation a creation order; by a sort index ``<value>:<id>`` or ``~<creation
    order>`` (among tasks without the value); by name ``n<creation order>:<name>``
    (``n:<name>``: after all of the name) or ``~<creation order>``."""
    if not isinstance(after, str) or not after or len(after) > MAX_CURSOR_LENGTH:
        return False
    if field == "created":
        return _digits(after)
    if after.startswith("~"):
        return _digits(after[1:])
    first, colon, rest = after.partition(":")
    if not colon or not rest:
        return False
    if field == "name":
        return first[:1] == "n" and (first == "n" or _digits(first[1:]))
    try:
        return math.isfinite(float(first))
    except ValueError:
        return False


class TaskQuery(NamedTuple):
    """A search of the book's tasks; every filter is optional and they combine (AND)."""

    name: str | None = None
    state: str | None = None
    worker: str | None = None
    q: str | None = None
    """Task ids starting with this, tasks whose name contains it, or (a bounded scan)
    whose args, kwargs, exception, traceback or error contain it (case-insensitively)."""
    since_ms: int | None = None
    """Created at or after (ms since the epoch)."""
    until_ms: int | None = None
    """Created at or before."""
    sort: str = "newest"
    """A ``SORT_FIELDS`` field, ``-field`` descending (``sort_order``); tasks without
    the field's value (a queued task's runtime) come last in both directions."""
    limit: int = 50
    after: str | None = None
    """The ``next_after`` of the previous page."""

    @property
    def order(self) -> SortOrder:
        """The order ``sort`` names."""
        return sort_order(self.sort)

    def checked(self) -> TaskQuery:
        """The query, or ``AsyncBookError`` (``invalid``) naming the first bad field."""
        for field in ("name", "worker", "q"):
            value = getattr(self, field)
            if value is not None and (not isinstance(value, str) or not value or len(value) > 200):
                raise invalid(f"{field} must be a string of 1 to 200 characters", field=field)
        if self.state is not None and self.state not in STATE_NAMES:
            raise invalid(f"state must be one of {', '.join(STATE_NAMES)}", field="state")
        for field in ("since_ms", "until_ms"):
            value = getattr(self, field)
            if value is not None and (type(value) is not int or value < 0):
                raise invalid(f"{field} must be a whole number of ms >= 0", field=field)
        order = sort_order(self.sort)
        if type(self.limit) is not int or not 1 <= self.limit <= 1000:
            raise invalid("limit must be a whole number from 1 to 1000", field="limit")
        if self.after is not None and not _cursor_ok(self.after, order.field):
            raise invalid("after must be the next_after of a previous page", field="after")
        return self


class IndexLag(WireModel):
    """How far behind the console's indexes are (the state, name and sort indexes are
    built from the writes' change stream, off the write path): the changes not yet
    applied, and the age (ms, the server's clock) of the oldest; 0 and None when caught
    up."""

    entries: StrictInt = 0
    oldest_age_ms: StrictInt | None = None


@runtime_checkable
class IndexedBook(Protocol):
    """A book whose console indexes are built off the write path (``RedisBook``): who
    keeps them calls this now and then (the worker's service thread)."""

    def catch_up_index(self, batches: int = ...) -> IndexLag:
        """Apply waiting changes to the indexes (up to ``batches`` batches a shard); how
        far behind they stayed."""
        ...


class SearchPage(WireModel):
    """One page of a search, and the number of matching tasks per state.

    ``totals_exact`` is false when the totals were counted over the first
    ``SEARCH_SCAN_LIMIT`` candidates only (a worker, ``q`` or time filter).
    ``scanned`` counts the index entries the page's walk examined; ``scan_complete`` is
    false when it stopped at its budget (the page may then hold fewer tasks than asked,
    and ``next_after`` continues the walk: pages never skip or repeat a task).
    """

    tasks: tuple[SearchRow, ...]
    totals: dict[str, int]
    totals_exact: bool = True
    next_after: StrictStr | None = None
    scanned: StrictInt = 0
    scan_complete: bool = True
    matched: dict[str, int] | None = None
    """With ``q``: how many of the page's tasks it matched by id, by name, by text."""
    index_lag: IndexLag = IndexLag()
    """How far behind the indexes the page was read from stayed (after its catch-up)."""


def matched_counts(rows: Sequence[SearchRow]) -> dict[str, int]:
    """How many of these rows ``q`` matched by id, by name and by text."""
    counts = {"id": 0, "name": 0, "text": 0}
    for row in rows:
        if row.matched_by is not None:
            counts[row.matched_by] += 1
    return counts


class WorkerSummary(WireModel):
    """A worker seen recently (its tasks' starts and heartbeats), with its counts."""

    name: StrictStr
    last_seen_ms: Number
    running: tuple[StrictStr, ...]
    started: StrictInt
    succeeded: StrictInt
    failed: StrictInt
    online: bool | None = None
    """Whether its record is fresh (``asyncbook._fleet``); None: it keeps none (an older
    asyncbook, or seen only in its tasks)."""
    record: WorkerRecord | None = None
    """What it announced of itself last: host, pid, versions, pool, queues, load."""


class MinuteStats(WireModel):
    """One minute of one task name (or of every name): ends by state, and runtimes."""

    minute_ms: Number
    started: StrictInt = 0
    succeeded: StrictInt = 0
    failed: StrictInt = 0
    expired: StrictInt = 0
    cancelled: StrictInt = 0
    runtime_buckets: tuple[StrictInt, ...] = ()
    p50_ms: Number | None = None
    p95_ms: Number | None = None
    p99_ms: Number | None = None


class TaskStats(WireModel):
    """Per-minute stats over a window ending now, and the window's totals; ``name`` the
    one task name they count (left out of the wire form when they count every name)."""

    name: StrictStr | None = None
    window_ms: Number
    now_ms: Number
    minutes: tuple[MinuteStats, ...]
    totals: dict[str, int]
    runtime_buckets_ms: tuple[int, ...] = RUNTIME_BUCKETS_MS
    runtime_buckets: tuple[StrictInt, ...] = ()
    p50_ms: Number | None = None
    p95_ms: Number | None = None
    p99_ms: Number | None = None
    failure_rate: float | None = None


def percentile_ms(buckets: Sequence[int], fraction: float) -> float | None:
    """The runtime below which ``fraction`` of the counted runs ended, from histogram
    bucket counts (``RUNTIME_BUCKETS_MS`` bounds, then the rest), interpolated linearly
    inside its bucket as Prometheus' ``histogram_quantile`` does; None without runs."""
    total = sum(buckets)
    if total == 0:
        return None
    rank = fraction * total
    seen = 0
    lower = 0.0
    for index, count in enumerate(buckets):
        if index >= len(RUNTIME_BUCKETS_MS):
            return float(RUNTIME_BUCKETS_MS[-1])  # the open bucket: its lower bound
        upper = float(RUNTIME_BUCKETS_MS[index])
        if count and seen + count >= rank:
            return lower + (upper - lower) * (rank - seen) / count
        seen += count
        lower = upper
    return float(RUNTIME_BUCKETS_MS[-1])


def totals_of(counts: Mapping[str, int]) -> dict[str, int]:
    """Counts for every state, in ``STATE_NAMES`` order (0 where absent)."""
    return {state: int(counts.get(state, 0)) for state in STATE_NAMES}


class NameTotals(WireModel):
    """Counts of one task name since the book began keeping them (Prometheus counters):
    starts, ends by state, and the runtime histogram of its ended runs."""

    name: StrictStr
    started: StrictInt = 0
    succeeded: StrictInt = 0
    failed: StrictInt = 0
    expired: StrictInt = 0
    cancelled: StrictInt = 0
    runtime_buckets: tuple[StrictInt, ...] = ()
    runtime_sum_ms: Number = 0
