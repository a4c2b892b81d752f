"""The operator console's JSON API: search, workers, stats and task names.

Served only over a book that keeps task info (``ConsoleBook``: RedisBook); over any other
book these routes do not exist. Query strings are read here: every bad value is a 400
naming its parameter, and every value is bounded before the book sees it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .._console import (
    MAX_CURSOR_LENGTH,
    STATS_MINUTE_MS,
    STATS_WINDOW_MS,
    SearchPage,
    TaskInfo,
    TaskQuery,
    sort_order,
)
from .._models import to_wire
from .._times import parse_duration, parse_moment
from ..errors import AsyncBookError, invalid
from ._reader import ConsoleBook, Reader
from ._sse import parse_count

__all__ = [
    "CONSOLE_FILTERS",
    "listing_answer",
    "DEFAULT_STATS_WINDOW_MS",
    "MAX_WORKERS_WITHIN_MS",
    "ConsoleApi",
    "ConsoleBook",
    "search_query",
    "task_answer",
]

DEFAULT_STATS_WINDOW_MS = 3_600_000
MAX_WORKERS_WITHIN_MS = 7 * 86_400_000
"""How far back ``/api/workers?within=`` may look."""
MAX_PARAMETER = 200
"""Longest value a console parameter may have (names, worker names, id prefixes, times)."""

_PARAMETER_OF_FIELD = {"since_ms": "since", "until_ms": "until"}
"""The book's name for a field -> the query parameter that carried it."""


def _text(params: Mapping[str, str], field: str) -> str | None:
    """A parameter's value; absent and empty are both None."""
    value = params.get(field)
    return value or None


def _count(params: Mapping[str, str], field: str, default: int) -> int:
    text = params.get(field)
    return default if text in (None, "") else parse_count(text, field)


def search_query(params: Mapping[str, str], now_ms: int) -> TaskQuery:
    """The search a query string asks for (``since``/``until`` read as ``parse_moment``)."""
    since = _text(params, "since")
    until = _text(params, "until")
    since_ms = None if since is None else parse_moment(since, "since", now_ms)
    until_ms = None if until is None else parse_moment(until, "until", now_ms)
    # until before since is an empty range: nothing matches (no refusal, which the
    # OpenAPI document could not say: a parameter's schema cannot name another's value)
    sort = _text(params, "sort") or "newest"
    order = sort_order(sort)  # a 400 naming sort, listing what it accepts
    after = _text(params, "after")
    query = TaskQuery(
        name=_text(params, "name"),
        state=_text(params, "state"),
        worker=_text(params, "worker"),
        q=_text(params, "q"),
        since_ms=since_ms,
        until_ms=until_ms,
        sort=order.spelling,
        limit=_count(params, "limit", 50),
        after=_cursor(after, order.field == "created"),
    )
    return _checked(query)


def _cursor(after: str | None, by_creation: bool) -> str | None:
    """``after`` as the book reads it: by creation a creation-order score (ASCII digits,
    within JSON's exact integers, as ``parse_count`` reads them); else as given, bounded
    (the book checks its shape)."""
    if after is None:
        return None
    if by_creation:
        return str(parse_count(after, "after"))
    if len(after) > MAX_CURSOR_LENGTH:
        raise invalid("after must be the nextAfter of a previous page", field="after")
    return after


def _checked(query: TaskQuery) -> TaskQuery:
    """``query.checked()``, a refusal naming the query parameter, not the book's field."""
    try:
        return query.checked()
    except AsyncBookError as error:
        field = _PARAMETER_OF_FIELD.get(error.field or "")
        if field is None:
            raise
        message = error.message.replace(error.field or "", field)
        raise AsyncBookError(error.code, message, field=field) from None


def _window(params: Mapping[str, str]) -> int:
    text = _text(params, "window")
    if text is None:
        return DEFAULT_STATS_WINDOW_MS
    window = parse_duration(text, "window")
    if not STATS_MINUTE_MS <= window <= STATS_WINDOW_MS:
        raise invalid("window must be from 1m to 24h", field="window")
    return window


def _within(params: Mapping[str, str]) -> int | None:
    text = _text(params, "within")
    if text is None:
        return None
    within = parse_duration(text, "within")
    if not 1 <= within <= MAX_WORKERS_WITHIN_MS:
        raise invalid("within must be from 1ms to 7d", field="within")
    return within


def _name(params: Mapping[str, str]) -> str | None:
    name = _text(params, "name")
    if name is not None and len(name) > MAX_PARAMETER:
        raise invalid(f"name must be at most {MAX_PARAMETER} characters", field="name")
    return name


async def task_answer(book: Reader, task_id: str, with_info: bool = False) -> dict[str, Any] | None:
    """``GET /api/tasks/<id>``: the task's JSON, and ``with_info`` (a ``ConsoleBook``) its
    info, appended so the task's own keys are unchanged; None when there is no task."""
    task = await book.get(task_id)
    if task is None:
        return None
    body = to_wire(task)
    if with_info:
        # Deleted between the two reads: the info of a task nobody recorded anything for.
        body["info"] = to_wire(await book.info(task_id) or TaskInfo(id=task_id))
    return body


def _search_answer(page: SearchPage) -> dict[str, Any]:
    body = to_wire(page)
    for row in body["tasks"]:
        row["task"].pop("history", None)
    return body


CONSOLE_FILTERS = ("name", "worker", "q", "since", "until", "sort")
"""``/api/tasks`` parameters only a book with a console can answer."""


def listing_answer(page: SearchPage) -> dict[str, Any]:
    """``/api/tasks``'s answer from a search: its tasks as ever (without history), each
    with an ``info`` key (and ``matchedBy`` with ``q``), then ``totals``,
    ``totalsExact``, ``scanned`` and ``scanComplete`` (``matched`` with ``q``; and
    ``nextAfter``), and ``indexLag``."""
    body: dict[str, Any] = {"tasks": []}
    for row in page.tasks:
        task = to_wire(row.task)
        task.pop("history", None)
        task["info"] = to_wire(row.info)
        if row.matched_by is not None:
            task["matchedBy"] = row.matched_by
        body["tasks"].append(task)
    if page.next_after is not None:
        body["nextAfter"] = page.next_after
    body["totals"] = page.totals
    body["totalsExact"] = page.totals_exact
    body["scanned"] = page.scanned
    body["scanComplete"] = page.scan_complete
    if page.matched is not None:
        body["matched"] = page.matched
    body["indexLag"] = to_wire(page.index_lag)
    return body


class ConsoleApi:
    """The console's handlers over one book (a ``ConsoleBook``, read awaited)."""

    def __init__(self, book: Reader) -> None:
        self.book = book

    async def search(self, request: Request) -> Response:
        query = search_query(request.query_params, int(time.time() * 1000))
        page = await self.book.search(query)
        return JSONResponse(_search_answer(page))

    async def workers(self, request: Request) -> Response:
        within = _within(request.query_params)
        found = await (self.book.workers() if within is None else self.book.workers(within))
        return JSONResponse({"workers": [to_wire(worker) for worker in found]})

    async def stats(self, request: Request) -> Response:
        params = request.query_params
        name, window = _name(params), _window(params)
        stats = await self.book.stats(name, window)
        return JSONResponse(to_wire(stats))

    async def names(self, request: Request) -> Response:
        return JSONResponse({"names": await self.book.task_names()})
