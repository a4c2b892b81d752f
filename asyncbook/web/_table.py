"""The route table: every method and path the status server answers, its handler, its
parameters, body and answers (their pydantic models) — and so the API document.

``create_app`` mounts the table (``starlette_routes``); ``/openapi.json`` is generated
from the same table (``openapi_document``): a route cannot be served undocumented.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .._console import RUNTIME_BUCKETS_MS, SearchPage, TaskStats
from .._models import AsyncTask, CallbackResult, ResumeResult
from .._queues import MAX_QUEUES, QueuesReport
from ._audit_api import AuditApi
from ._cancel import CANCEL_BODY_LIMIT
from ._canvas_api import CanvasApi
from ._canvas_table import canvas_operations
from ._console_api import ConsoleApi
from ._csv_export import NEXT_AFTER_HEADER, SEARCH_CSV_PATH, CsvExport
from ._handlers import StatusApp
from ._health import HEALTH_PATH, health_handler
from ._login import LOGIN_BODY_LIMIT, Login
from ._openapi import openapi_document
from ._operator_table import audit_operations, resend_operations
from ._output_api import output_operations
from ._paths import CANVAS_PAGES, GROUP_PAGES, GROUPS, TASKS
from ._queues import REUSE_SECONDS, QueuesApi
from ._resend import ResendApi
from ._results import ResultApi
from ._routes import ERROR, SSE, STREAMS_FULL, Answer, Operation, Page, json_answer, read_answers
from ._schemas import (
    CancelRefusal,
    CancelRequest,
    CursorQuery,
    DeliveryAnswer,
    DeliveryHeaders,
    Error,
    Forbidden,
    GroupDetail,
    GroupIdPath,
    GroupQuery,
    ListingQuery,
    LoginForm,
    NameList,
    QueuesQuery,
    SearchCsvQuery,
    SearchQuery,
    StatsQuery,
    StreamHeaders,
    TaskIdPath,
    TaskList,
    TaskWithInfo,
    WorkerList,
    WorkersQuery,
)

__all__ = ["route_table"]

Table = list[Operation | Page]

_LISTING = "List tasks, newest first"
_SEARCH_HELP = (
    "The search's filters and sort (as `/api/search`); each task also carries its "
    "`info` (and `matchedBy` with `q`), and the answer `totals` per state for the "
    "filter, `totalsExact`, `scanned` and `scanComplete` (and `matched` with `q`), and "
    "`indexLag`: how far behind the index the page was read from stayed (`entries` not "
    "applied yet, `oldestAgeMs` the oldest's age; `entries` 0 alone when caught up)."
)

_STREAM_HELP = (
    "Each event's id is the task version; reconnecting with Last-Event-ID "
    "resumes (a delta, or a snapshot when too far behind). The stream ends "
    "with an `end` event once the task is terminal."
)
_CANCEL_HELP = (
    "Writes `cancelled` to the book (once: a second cancel answers "
    "`duplicate-cancel`); workers learn of it through the change channel. "
    "The body is optional (empty, or JSON). Needs the bearer token when "
    "the server has one (the sign-in cookie never authorizes a change); "
    "a browser request from another site is refused (403)."
)
_GROUP_HELP = (
    "The group's counters (one O(1) lookup) and its first `limit` members "
    "in creation order, without history. `total` is absent until the "
    "group's size is declared; `ended` once every declared member ended."
)
_GROUP_STREAM_HELP = (
    "First a `group` event (the GroupSummary). Then, whenever members "
    "change, a `member` event per changed member (the task without "
    "history; its `id:` is the member's version) followed by a `group` "
    "event; bursts are coalesced, so a member may skip versions. "
    "`resync` (data `{}`) says changes may have been missed (the server's "
    "change feed reconnected): reload the members. `end` (data "
    "`{groupId, total, counts}`) follows the summary once the group has "
    "ended, and closes the stream. There is no resume: a reconnect "
    "(Last-Event-ID is ignored) starts over with the summary. A group "
    "that is not sealed never ends."
)
_SEARCH_PAGE_HELP = (
    "Filters combine (AND); empty values are ignored. Each row is the task "
    "(without history) and its info. `sort` orders every match (kept exact by "
    "sort indexes the indexer maintains), `nextAfter` continues it without "
    "skipping or repeating a task. `totals` counts every match per state; "
    "`totalsExact` is false when they were counted over the first candidates "
    "only (a worker, `q` or time filter over many tasks). `scanned` counts the "
    "index entries the page's walk examined (at most 10,000; 5,000 with `q`); "
    "`scanComplete` is false when the walk stopped there (a short page, "
    "`nextAfter` continues). The indexes are built from the writes' changes, off the "
    "write path; each search first applies the waiting ones (a bounded number) and "
    "`indexLag` says how far behind it stayed (`entries`, `oldestAgeMs` of the oldest)."
)
_SEARCH_CSV_HELP = (
    "The search's filters and sort (as `/api/search`); `limit` bounds the download "
    "(default and at most 10,000 rows). Cells a spreadsheet would run as a formula are "
    "led by `'`. When more rows match, `X-Next-After` is the cursor to pass as `after` "
    "for the next download."
)
_NEXT_AFTER: dict[str, Any] = {
    "description": "The cursor of the rows past this download (absent on the last).",
    "schema": {"type": "string"},
}
_STATS_HELP = (
    "One `minutes` entry per minute of the window, oldest first (zeros "
    "included). Runtime buckets are counts per upper bound in "
    f"`runtimeBucketsMs` ({', '.join(map(str, RUNTIME_BUCKETS_MS))} ms), "
    "then the rest."
)
_QUEUES_HELP = (
    "The queues the broker has bindings for (a Redis broker: kombu's `_kombu.binding.*` "
    "sets, found with a bounded SCAN; an AMQP broker: the queues named), plus every "
    "`queue` named and asyncbook's own, at most `limit` "
    f"(`truncated` says when more were found; at most {MAX_QUEUES}). On Redis the lengths, "
    "priority sub-queues, oldest messages and unacked messages are read in one pipelined "
    "round trip; the per-queue `unacked` counts come from at most 1,000 unacked messages "
    "(`unacked.exact` says whether that was all of them; `unacked.total` is exact). "
    "`oldestAgeMs` is how long ago the book created the oldest waiting message's task "
    "(null for an untracked task, with `oldestNote` saying why). A read of the broker "
    f"answers the same question again for {REUSE_SECONDS:g} s. Without a broker, or one "
    "that does not answer, `broker.problem` says why and `asyncbook` still carries the "
    "sweep's health (as `/api/health`)."
)
_HEALTH_HELP = (
    "`ok` is false while tasks are past their deadline and no sweep ran for "
    "`silentAfterMs` (30 s); the answer is then 503, else 200, with the same body. "
    "With a broker, `unconsumedQueues` names the queues whose ready messages no online "
    "worker consumes, and `strandedTasks` per queue the tracked tasks queued over 5 minutes "
    "that no online worker consumes (flags only: the status follows the sweep)."
)


_NO_TASK = json_answer(Error, "No such task; code `invalid-request`, field `taskId`")
"""An unknown task: 404, with the reference's code for it."""
_FORBIDDEN = json_answer(Forbidden, "A change needs the operator role (`role`); code `forbidden`")


_RESULT_HELP = (
    "The bytes of a result stored by reference (`resultRef` in the server's artifact "
    "store: `asyncbook serve --artifacts`), checked against `resultHash` first: "
    "`application/json` when they are JSON, `text/plain` when text, else "
    "`application/octet-stream`; `X-Result-Hash` is the hash. The read role suffices."
)


def _result_operation(results: ResultApi) -> Operation:
    return Operation.at(
        "GET /api/tasks/{id}/result",
        results.result,
        "A succeeded task's result, fetched from the artifact store and checked",
        {
            200: Answer("The result's bytes", media="application/octet-stream"),
            400: ERROR,
            404: json_answer(
                Error,
                "No such task, no artifact store (`no-store`), or the result is not in "
                "it (`not-found`, `invalid-request`)",
            ),
            409: json_answer(Error, "The task has no result (`no-result`)"),
            502: json_answer(Error, "The stored bytes do not match `resultHash` (`damaged`)"),
            503: json_answer(Error, "The store did not answer (`unavailable`)"),
        },
        description=_RESULT_HELP,
        path_params=TaskIdPath,
        raw=TASKS,
    )


def _task_operations(status: StatusApp) -> Table:
    task: type[BaseModel] = TaskWithInfo if status.console else AsyncTask
    listing: type[BaseModel] = SearchQuery if status.console else ListingQuery
    ids: dict[str, Any] = {"path_params": TaskIdPath, "raw": TASKS}
    return [
        Operation.at(
            "GET /api/tasks",
            status.list_tasks,
            _LISTING,
            {200: json_answer(TaskList, "One page (tasks without history)"), 400: ERROR},
            description=_SEARCH_HELP if status.console else None,
            query=listing,
        ),
        Operation.at(
            "GET /api/tasks/{id}",
            status.get_task,
            "The task, with its history (and its `info`, when kept)",
            {200: json_answer(task, "The task"), 400: ERROR, 404: _NO_TASK},
            **ids,
        ),
        Operation.at(
            "GET /api/tasks/{id}/events",
            status.events,
            "Resume from a version: caught-up, delta or snapshot",
            {200: json_answer(ResumeResult, "The resume"), 400: ERROR, 404: _NO_TASK},
            query=CursorQuery,
            **ids,
        ),
        Operation.at(
            "GET /api/tasks/{id}/stream",
            status.stream,
            "Server-sent events: snapshot, change, task and end",
            {200: SSE, 400: ERROR, 404: _NO_TASK, 503: STREAMS_FULL},
            description=_STREAM_HELP,
            headers=StreamHeaders,
            query=CursorQuery,
            **ids,
        ),
        Operation.at(
            "POST /api/tasks/{id}/delivery",
            status.deliver,
            "Hand the result over once per idempotency key",
            {
                200: json_answer(DeliveryAnswer, "Delivered (or delivered before)"),
                400: ERROR,
                404: _NO_TASK,
                403: _FORBIDDEN,
                409: json_answer(Error, "Key used for another task, or no result"),
            },
            headers=DeliveryHeaders,
            **ids,
        ),
        Operation.at(
            "POST /api/tasks/{id}/cancel",
            status.cancel,
            "Cancel a queued or running task",
            {
                200: json_answer(
                    CallbackResult,
                    "Cancelled (reason `cancelled`), or cancelled before (`duplicate-cancel`)",
                ),
                400: json_answer(Error, "A bad reason (field `reason`) or body (field `body`)"),
                403: json_answer(
                    Forbidden,
                    "The read role (code `forbidden`, `role`: the role needed), or sent "
                    "from another site (code `cross-site`)",
                ),
                404: _NO_TASK,
                405: json_answer(Error, "Another method (`Allow: POST`)"),
                409: json_answer(
                    CancelRefusal,
                    "Not cancelled: the task had ended otherwise (`terminal-conflict`), "
                    "or its deadline had passed and it expired (`expired`)",
                ),
                413: json_answer(Error, f"A body larger than {CANCEL_BODY_LIMIT} bytes"),
                415: json_answer(Error, "A body that is not sent as JSON"),
            },
            description=_CANCEL_HELP,
            body=CancelRequest,
            **ids,
        ),
    ]


def _group_operations(status: StatusApp) -> Table:
    no_group = json_answer(Error, "No such group; code `not-found`")
    ids: dict[str, Any] = {"path_params": GroupIdPath, "raw": GROUPS}
    return [
        Operation.at(
            "GET /api/groups/{id}",
            status.get_group,
            "A group: counts by state, mean progress, and its first members",
            {
                **read_answers(GroupDetail, "The group", "A bad id (field `groupId`) or `limit`"),
                404: no_group,
            },
            **ids,
            query=GroupQuery,
            description=_GROUP_HELP,
        ),
        Operation.at(
            "GET /api/groups/{id}/stream",
            status.group_stream,
            "Server-sent events: group, member, resync and end",
            {200: SSE, 400: ERROR, 404: no_group, 503: STREAMS_FULL},
            **ids,
            description=_GROUP_STREAM_HELP,
        ),
    ]


def _console_operations(console: ConsoleApi, export: CsvExport, queues: QueuesApi) -> Table:
    """The console's endpoints (only over a book that keeps task info)."""
    return [
        Operation.at(
            "GET /api/queues",
            queues.queues,
            "The broker's queues: ready, per priority, unacked, the oldest's age",
            read_answers(
                QueuesReport,
                "The queues, and asyncbook's own with the sweep",
                "A bad `queue` or `limit`; `field` names it",
            ),
            description=_QUEUES_HELP,
            query=QueuesQuery,
        ),
        Operation.at(
            "GET /api/search",
            console.search,
            "Search tasks: filters, sort, and totals per state for the filter",
            read_answers(
                SearchPage, "One page, and totals per state", "A bad parameter; `field` names it"
            ),
            description=_SEARCH_PAGE_HELP,
            query=SearchQuery,
        ),
        Operation.at(
            f"GET {SEARCH_CSV_PATH}",
            export.search_csv,
            "Download a search's tasks as CSV (the columns of `asyncbook ls --csv`)",
            {
                200: Answer(
                    "The rows, under a header (`Content-Disposition: attachment`)",
                    media="text/csv",
                    headers={NEXT_AFTER_HEADER: _NEXT_AFTER},
                ),
                400: json_answer(Error, "A bad parameter; `field` names it"),
            },
            description=_SEARCH_CSV_HELP,
            query=SearchCsvQuery,
        ),
        Operation.at(
            "GET /api/workers",
            console.workers,
            "Workers seen recently, most recently seen first",
            read_answers(WorkerList, "The workers", "A bad `within`"),
            query=WorkersQuery,
        ),
        Operation.at(
            "GET /api/stats",
            console.stats,
            "Per-minute counts and runtime percentiles over a window ending now",
            read_answers(TaskStats, "The stats", "A bad `name` or `window`"),
            description=_STATS_HELP,
            query=StatsQuery,
        ),
        Operation.at(
            "GET /api/names",
            console.names,
            "Task names seen within the book's retention, sorted",
            {200: json_answer(NameList, "The names")},
        ),
    ]


def _signin_operations(login: Login) -> Table:
    """The sign-in form (served only when the server has a token)."""
    return [
        Operation.at(
            "GET /login",
            login.login,
            "The sign-in form (only when the server has a token)",
            {200: Answer("The form", media="text/html")},
            open=True,
            signin=True,
        ),
        Operation.at(
            "POST /login",
            login.login,
            "Sign the page in (only when the server has a token)",
            {
                303: Answer("Signed in: a session cookie, then `next`", media=None),
                401: Answer("Not the token: the form again", media=None),
                403: ERROR,
                413: json_answer(Error, f"A body larger than {LOGIN_BODY_LIMIT} bytes"),
                429: Answer(
                    "Too many failed attempts from this address",
                    media=None,
                    headers={"Retry-After": {"schema": {"type": "integer"}}},
                ),
            },
            body=LoginForm,
            body_media="application/x-www-form-urlencoded",
            body_required=True,
            open=True,
            signin=True,
        ),
        Operation.at(
            "POST /logout",
            login.logout,
            "End the page's session",
            {303: Answer("Signed out", media=None), 403: ERROR},
            open=True,
            signin=True,
        ),
    ]


def route_table(
    status: StatusApp, login: Login, queues: QueuesApi, resend: ResendApi, results: ResultApi
) -> Table:
    """Every route of a server over ``status``'s book; ``login``'s are mounted only when
    the server has a token (and documented always); ``queues`` reads the broker;
    ``resend``'s over a book that keeps task info."""
    document: dict[str, Any] = {}

    async def openapi(request: Request) -> Response:
        return JSONResponse(document)

    table: Table = [
        Page("/", status.page("index.html")),
        Page("/task", status.page("task.html")),
        Page("/groups/{id}", status.page("group.html"), raw=GROUP_PAGES),
        *_task_operations(status),
        *output_operations(status.reader, status.keepalive, status.streams),
        _result_operation(results),
        *_group_operations(status),
        Operation.at(
            "GET /api/changes",
            status.changes,
            "Server-sent events: every change as published",
            {200: SSE, 503: STREAMS_FULL},
        ),
        Operation.at(
            "GET /metrics",
            status.metrics,
            "Prometheus metrics (no token needed)",
            {200: Answer("Prometheus text", media=None)},
            open=True,
        ),
        Operation.at(
            f"GET {HEALTH_PATH}",
            health_handler(status.reader, queues),
            "Whether the expiry sweep runs (no token needed)",
            {
                200: Answer("Healthy: `{ok: true, lastSweepMs, overdueTasks, ...}`", media=None),
                503: Answer("The sweep stopped (or the book is unreachable)", media=None),
            },
            description=_HEALTH_HELP,
            open=True,
        ),
        Operation.at(
            "GET /openapi.json",
            openapi,
            "This description",
            {200: Answer("OpenAPI 3.1 JSON", media=None)},
        ),
        *_signin_operations(login),
    ]
    if status.audited:
        table += audit_operations(AuditApi(status.reader))
    if status.console:
        table += [Page("/workers", status.page("workers.html"))]
        table += [Page("/stats", status.page("stats.html"))]
        table += [Page("/queues", status.page("queues.html"))]
        export = CsvExport(status.reader)
        table += _console_operations(ConsoleApi(status.reader), export, queues)
        table += resend_operations(resend)
        table += [Page("/canvas/{id}", status.page("canvas.html"), raw=CANVAS_PAGES)]
        table += canvas_operations(CanvasApi(status.reader, status.audited, resend.resender))
    document.update(openapi_document(e for e in table if isinstance(e, Operation)))
    return table
