"""``POST /api/tasks/<id>/resend`` and ``POST /api/resend``: a task, or a search's failed
tasks, sent again from their kept messages as new tasks, through a ``Resending`` the
server is built with (``asyncbook.celery.Resender``: this layer imports no Celery).
``/retry`` and ``/api/retry`` are their old names, answered alike until 0.3.0.

Both are changes: the access middleware holds them to the operator role, and they refuse
a browser request from another site, as cancel does, with cancel's checks
(``cross_site``, ``cancel_reason``). Each resend is recorded on the original's audit
trail as the request's principal (``actor_of``).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from functools import partial
from typing import Protocol

import anyio.to_thread
from pydantic import BaseModel, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .._console import TaskQuery
from .._models import WireModel
from ..errors import invalid
from ..redis import BROKER_SETTING, RESENDABLE_STATES, RedisBook, ResendResult
from ._access import actor_of
from ._bodies import cross_site, read_json_object, refuse_cross_site
from ._cancel import CANCEL_BODY_LIMIT, CANCEL_FIELDS, cancel_reason
from ._console_api import search_query
from ._paths import raw_path, split_task_path
from ._responses import error_response
from ._schemas import MOMENT, or_empty, reason_body

__all__ = [
    "RESEND_BATCH",
    "ResendApi",
    "ResendBatch",
    "ResendOutcome",
    "ResendQuery",
    "ResendRefusal",
    "ResendRequest",
    "Resending",
    "resender_of",
]

RESEND_BATCH = 1000
"""The most tasks one ``POST /api/resend`` resends (then ``nextAfter`` continues)."""
_DEFAULT_BATCH = 100

_STATUS_OF_CODE = {
    "not-found": 404,
    "not-retryable": 409,
    "already-retried": 409,
    "no-message": 409,
    "message-too-large": 409,
    "not-sent": 503,
}
"""HTTP status of a single resend's refusal, by code (any other: 500)."""
_FIELD_OF_CODE = {
    "not-found": "taskId",
    "not-retryable": "taskId",
    "already-retried": "taskId",
    "no-message": "asyncbook_keep_messages",
    "message-too-large": "asyncbook_keep_message_limit",
}


class Resending(Protocol):
    """What sends tasks again: ``asyncbook.celery.Resender`` (the book decides, kombu
    publishes), given to the server by whoever builds it."""

    @property
    def book(self) -> RedisBook:
        """The book the tasks are in (a bulk resend searches it)."""
        ...

    def resend(
        self, task_ids: Sequence[str], *, actor: str | None = None, reason: str | None = None
    ) -> list[ResendResult]:
        """Resend each task; one answer per task, in order."""
        ...


ResendRequest = reason_body(
    "ResendRequest",
    "A resend's optional body.",
    "Why, kept with the new task (`retryReason` in its info).",
    __name__,
)


class ResendOutcome(WireModel):
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


class ResendRefusal(WireModel):
    """A single resend that did not happen."""

    code: str
    message: str
    field: str | None = None
    retried_as: str | None = None


class ResendBatch(WireModel):
    """``POST /api/resend``'s answer: one outcome per task the search found (``retried``:
    how many were sent)."""

    results: list[ResendOutcome]
    retried: int
    refused: int
    next_after: str | None = Field(description="Continue the search from here (null: done).")


class ResendQuery(BaseModel):
    """The search whose tasks a bulk resend sends again (the parameters of ``/api/search``)."""

    name: str | None = Field(None, description="Only tasks of this Celery task name.")
    state: str = Field(
        "failed",
        description="failed, expired or cancelled.",
        json_schema_extra={"enum": list(RESENDABLE_STATES)},
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
        le=RESEND_BATCH,
        description="How many tasks. Empty: as if absent.",
        json_schema_extra=or_empty,
    )
    after: str | None = Field(None, description="The previous answer's `nextAfter`.")


def _no_broker() -> Response:
    return error_response(
        503,
        "no-broker",
        "this server has no broker to send tasks again to: start it with --broker "
        f"(or {BROKER_SETTING})",
        "broker",
    )


class ResendApi:
    """The resend handlers over ``resender`` (None: the server has no broker, and says so)."""

    def __init__(self, resender: Resending | None) -> None:
        self.resender = resender

    async def _reason(self, request: Request) -> str | Response | None:
        """The body's ``reason`` (cancel's rules), or the refusal to answer with."""
        if cross_site(request):
            return refuse_cross_site("this change")
        body = await read_json_object(request, CANCEL_BODY_LIMIT, CANCEL_FIELDS)
        if isinstance(body, Response):
            return body
        return cancel_reason(body.get("reason"))

    async def _resend(
        self, request: Request, resender: Resending, ids: list[str], reason: str | None
    ) -> list[ResendResult]:
        """Resend ``ids`` as the request's principal (``actor_of``: on the audit trail)."""
        call = partial(resender.resend, ids, actor=actor_of(request), reason=reason)
        results: list[ResendResult] = await anyio.to_thread.run_sync(call)
        return results

    async def resend_task(self, request: Request) -> Response:
        task_id = split_task_path(raw_path(request.scope), request.query_params.get("id"))[0]
        reason = await self._reason(request)
        if isinstance(reason, Response):
            return reason
        if self.resender is None:
            return _no_broker()
        [result] = await self._resend(request, self.resender, [task_id], reason)
        if result.code is None:
            return JSONResponse(result.wire())
        body = {
            "code": result.code,
            "message": result.message,
            "field": _FIELD_OF_CODE.get(result.code),
            "retriedAs": result.retried_as,
        }
        return JSONResponse(body, status_code=_STATUS_OF_CODE.get(result.code, 500))

    async def resend_search(self, request: Request) -> Response:
        reason = await self._reason(request)
        if isinstance(reason, Response):
            return reason
        query = _resend_query(request)
        if self.resender is None:
            return _no_broker()
        page = await anyio.to_thread.run_sync(self.resender.book.search, query)
        ids = [row.task.id for row in page.tasks]
        results = await self._resend(request, self.resender, ids, reason)
        retried = sum(1 for result in results if result.code is None)
        return JSONResponse(
            {
                "results": [result.wire() for result in results],
                "retried": retried,
                "refused": len(results) - retried,
                "nextAfter": page.next_after,
            }
        )


def _resend_query(request: Request) -> TaskQuery:
    """The search of a bulk resend: ``/api/search``'s parameters, a resendable state
    (failed by default) and at most ``RESEND_BATCH`` tasks."""
    params = dict(request.query_params)
    params.setdefault("state", "failed")
    if params["state"] not in RESENDABLE_STATES:
        raise invalid(f"state must be one of {', '.join(RESENDABLE_STATES)}", field="state")
    params.setdefault("limit", str(_DEFAULT_BATCH))
    query = search_query(params, int(time.time() * 1000))
    if query.limit > RESEND_BATCH:
        raise invalid(f"limit must be at most {RESEND_BATCH}", field="limit")
    return query


def resender_of(resender: Resending | None, retrier: Resending | None) -> Resending | None:
    """``resender``, or the one given by its old name ``retrier`` (with a warning)."""
    if retrier is None:
        return resender
    warnings.warn(
        "retrier= is deprecated (gone in 0.3.0): pass resender=", DeprecationWarning, stacklevel=3
    )
    return resender if resender is not None else retrier
