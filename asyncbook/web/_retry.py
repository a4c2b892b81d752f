"""``POST /api/tasks/<id>/retry`` and ``POST /api/retry``: a task, or a search's failed
tasks, sent again from their kept messages as new tasks (``Retrier``).

Both are changes: the access middleware holds them to the operator role, and they refuse
a browser request from another site, as cancel does, with cancel's checks
(``cross_site``, ``cancel_reason``). Each retry is recorded on the original's audit trail
as the request's principal (``actor_of``).
"""

from __future__ import annotations

import time
from functools import partial
from typing import Annotated

import anyio.to_thread
from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .._console import TaskQuery
from .._models import WireModel
from ..errors import invalid
from ..redis import BROKER_SETTING, RETRYABLE_STATES, Retrier, RetryResult
from ._access import actor_of
from ._bodies import cross_site, read_json_object, refuse_cross_site
from ._cancel import CANCEL_BODY_LIMIT, CANCEL_FIELDS, MAX_REASON, cancel_reason
from ._console_api import search_query
from ._paths import raw_path, split_task_path
from ._responses import error_response
from ._schemas import MOMENT, or_empty

__all__ = [
    "RETRY_BATCH",
    "RetryApi",
    "RetryBatch",
    "RetryOutcome",
    "RetryQuery",
    "RetryRefusal",
    "RetryRequest",
]

RETRY_BATCH = 1000
"""The most tasks one ``POST /api/retry`` retries (then ``nextAfter`` continues)."""
_DEFAULT_BATCH = 100

_STATUS_OF_CODE = {
    "not-found": 404,
    "not-retryable": 409,
    "already-retried": 409,
    "no-message": 409,
    "message-too-large": 409,
    "not-sent": 503,
}
"""HTTP status of a single retry's refusal, by code (any other: 500)."""
_FIELD_OF_CODE = {
    "not-found": "taskId",
    "not-retryable": "taskId",
    "already-retried": "taskId",
    "no-message": "asyncbook_keep_messages",
    "message-too-large": "asyncbook_keep_message_limit",
}


class RetryRequest(BaseModel):
    """A retry's optional body."""

    model_config = ConfigDict(extra="forbid")

    reason: Annotated[
        str | None,
        WithJsonSchema({"type": ["string", "null"], "maxLength": MAX_REASON}),
        Field(description="Why, kept with the new task (`retryReason` in its info)."),
    ] = None


class RetryOutcome(WireModel):
    """What became of one task: sent again as ``retriedAs``, or refused (``code``)."""

    task_id: str
    retried_as: str | None = Field(
        description="The new task (also set for `already-retried`, and for `not-sent`, "
        "whose new task was cancelled)."
    )
    code: str | None = Field(
        description="null when sent; else not-found, not-retryable, already-retried, "
        "no-message, message-too-large or not-sent."
    )
    message: str | None


class RetryRefusal(WireModel):
    """A single retry that did not happen."""

    code: str
    message: str
    field: str | None = None
    retried_as: str | None = None


class RetryBatch(WireModel):
    """``POST /api/retry``'s answer: one outcome per task the search found."""

    results: list[RetryOutcome]
    retried: int
    refused: int
    next_after: str | None = Field(description="Continue the search from here (null: done).")


class RetryQuery(BaseModel):
    """The search whose tasks a bulk retry sends again (the parameters of ``/api/search``)."""

    name: str | None = Field(None, description="Only tasks of this Celery task name.")
    state: str = Field(
        "failed",
        description="failed, expired or cancelled.",
        json_schema_extra={"enum": list(RETRYABLE_STATES)},
    )
    worker: str | None = Field(None, description="Only tasks run by this worker.")
    q: str | None = Field(None, description="Only task ids starting with this.")
    since: str | None = Field(
        None, description="Created at or after (as `/api/search`).", json_schema_extra=MOMENT
    )
    until: str | None = Field(
        None, description="Created at or before (as `/api/search`).", json_schema_extra=MOMENT
    )
    sort: str = Field("newest", json_schema_extra={"enum": ["newest", "oldest"]})
    limit: int = Field(
        _DEFAULT_BATCH,
        ge=1,
        le=RETRY_BATCH,
        description="How many tasks. Empty: as if absent.",
        json_schema_extra=or_empty,
    )
    after: str | None = Field(None, description="The previous answer's `nextAfter`.")


def _no_broker() -> Response:
    return error_response(
        503,
        "no-broker",
        "this server has no broker to send retries to: start it with --broker "
        f"(or {BROKER_SETTING})",
        "broker",
    )


class RetryApi:
    """The retry handlers over ``retrier`` (None: the server has no broker, and says so)."""

    def __init__(self, retrier: Retrier | None) -> None:
        self.retrier = retrier

    async def _reason(self, request: Request) -> str | Response | None:
        """The body's ``reason`` (cancel's rules), or the refusal to answer with."""
        if cross_site(request):
            return refuse_cross_site("this change")
        body = await read_json_object(request, CANCEL_BODY_LIMIT, CANCEL_FIELDS)
        if isinstance(body, Response):
            return body
        return cancel_reason(body.get("reason"))

    async def _retry(
        self, request: Request, retrier: Retrier, ids: list[str], reason: str | None
    ) -> list[RetryResult]:
        """Retry ``ids`` as the request's principal (``actor_of``: on the audit trail)."""
        call = partial(retrier.retry, ids, actor=actor_of(request), reason=reason)
        results: list[RetryResult] = await anyio.to_thread.run_sync(call)
        return results

    async def retry_task(self, request: Request) -> Response:
        task_id = split_task_path(raw_path(request.scope), request.query_params.get("id"))[0]
        reason = await self._reason(request)
        if isinstance(reason, Response):
            return reason
        if self.retrier is None:
            return _no_broker()
        [result] = await self._retry(request, self.retrier, [task_id], reason)
        if result.code is None:
            return JSONResponse(result.wire())
        body = {
            "code": result.code,
            "message": result.message,
            "field": _FIELD_OF_CODE.get(result.code),
            "retriedAs": result.retried_as,
        }
        return JSONResponse(body, status_code=_STATUS_OF_CODE.get(result.code, 500))

    async def retry_search(self, request: Request) -> Response:
        reason = await self._reason(request)
        if isinstance(reason, Response):
            return reason
        query = _retry_query(request)
        if self.retrier is None:
            return _no_broker()
        page = await anyio.to_thread.run_sync(self.retrier.book.search, query)
        ids = [row.task.id for row in page.tasks]
        results = await self._retry(request, self.retrier, ids, reason)
        retried = sum(1 for result in results if result.code is None)
        return JSONResponse(
            {
                "results": [result.wire() for result in results],
                "retried": retried,
                "refused": len(results) - retried,
                "nextAfter": page.next_after,
            }
        )


def _retry_query(request: Request) -> TaskQuery:
    """The search of a bulk retry: ``/api/search``'s parameters, a retryable state
    (failed by default) and at most ``RETRY_BATCH`` tasks."""
    params = dict(request.query_params)
    params.setdefault("state", "failed")
    if params["state"] not in RETRYABLE_STATES:
        raise invalid(f"state must be one of {', '.join(RETRYABLE_STATES)}", field="state")
    params.setdefault("limit", str(_DEFAULT_BATCH))
    query = search_query(params, int(time.time() * 1000))
    if query.limit > RETRY_BATCH:
        raise invalid(f"limit must be at most {RETRY_BATCH}", field="limit")
    return query
