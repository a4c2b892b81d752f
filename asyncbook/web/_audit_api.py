"""The audit trail's endpoints: ``GET /api/tasks/{id}/audit`` and ``GET /api/audit``.

Both need the read role only: the trail says who changed what, which anyone who may
see the tasks may see (docs/access.md says why).
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .._audit import MAX_AUDIT_PAGE
from .._models import to_wire
from .._times import parse_moment
from ..errors import invalid
from ._paths import raw_path, split_task_path
from ._reader import Reader
from ._sse import parse_count

__all__ = ["AUDIT_PAGE", "AuditApi"]

AUDIT_PAGE = 100
"""Entries per answer unless ``limit`` says otherwise."""


def _window(params: Mapping[str, str]) -> tuple[int | None, int]:
    """``since`` (as the console reads it: ms, ``1h`` ago, ISO 8601) and ``limit``."""
    since = (params.get("since") or "").strip()
    since_ms = parse_moment(since, "since", int(time.time() * 1000)) if since else None
    text = params.get("limit")
    limit = AUDIT_PAGE if text in (None, "") else parse_count(text, "limit")
    if not 1 <= limit <= MAX_AUDIT_PAGE:
        raise invalid(f"limit must be from 1 to {MAX_AUDIT_PAGE}", field="limit")
    return since_ms, limit


class AuditApi:
    """The audit handlers over one book's reader (a book that keeps a trail)."""

    def __init__(self, reader: Reader) -> None:
        self.reader = reader

    async def task_audit(self, request: Request) -> Response:
        """One task's entries, newest first (none for a task without any)."""
        task_id = split_task_path(raw_path(request.scope), request.query_params.get("id"))[0]
        since_ms, limit = _window(request.query_params)
        entries = await self.reader.audit(task_id, since_ms=since_ms, limit=limit)
        return JSONResponse({"entries": [to_wire(entry) for entry in entries]})

    async def audit(self, request: Request) -> Response:
        """Every task's entries, newest first."""
        since_ms, limit = _window(request.query_params)
        entries = await self.reader.audit(None, since_ms=since_ms, limit=limit)
        return JSONResponse({"entries": [to_wire(entry) for entry in entries]})
