"""``GET /api/health``: whether the expiry sweep runs, for probes, uptime checks and the
page's banner.

200 while healthy, 503 while tasks are overdue and no sweep ran for 30 s: the status
codes load balancers, Kubernetes probes and uptime checkers read. The body is the same
JSON either way (``SweepHealth.to_wire``). Open like ``/metrics`` (no token): it tells
counts, never a task.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .._health import SILENT_MS, SweepHealth
from ._reader import Reader

__all__ = ["HEALTH_PATH", "health_handler", "read_health"]

HEALTH_PATH = "/api/health"


async def read_health(reader: Reader, silent_ms: int = SILENT_MS) -> SweepHealth:
    """``sweep_health`` read awaited, through the server's ``Reader`` (by the book's
    clock)."""
    now = await reader.now_ms()
    return SweepHealth(
        now_ms=now,
        last_sweep_ms=await reader.last_sweep_ms(),
        overdue=await reader.overdue_count(now),
        silent_ms=silent_ms,
    )


def health_handler(reader: Reader) -> Callable[[Request], Awaitable[Response]]:
    """The ``/api/health`` handler, reading the book through ``reader``."""

    async def health(request: Request) -> Response:
        answer = await read_health(reader)
        return JSONResponse(
            answer.to_wire(),
            status_code=200 if answer.ok else 503,
            headers={"Cache-Control": "no-store"},
        )

    return health
