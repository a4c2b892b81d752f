"""``GET /api/health``: whether the expiry sweep runs, for probes, uptime checks and the
page's banner.

200 while healthy, 503 while tasks are overdue and no sweep ran for 30 s: the status
codes load balancers, Kubernetes probes and uptime checkers read. The body is the same
JSON either way (``SweepHealth.to_wire``). Open like ``/metrics`` (no token): it tells
counts, never a task.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .._book import AsyncBook
from .._health import SweepHealth, sweep_health

__all__ = ["HEALTH_OPENAPI", "HEALTH_PATH", "health_route"]

HEALTH_PATH = "/api/health"

HEALTH_OPENAPI: dict[str, Any] = {
    "get": {
        "summary": "Whether the expiry sweep runs (no token needed)",
        "description": (
            "`ok` is false while tasks are past their deadline and no sweep ran for "
            "`silentAfterMs` (30 s); the answer is then 503, else 200, with the same body."
        ),
        "security": [],
        "responses": {
            "200": {"description": "Healthy: `{ok: true, lastSweepMs, overdueTasks, ...}`"},
            "503": {"description": "The sweep stopped (or the book is unreachable)"},
        },
    }
}

Call = Callable[..., Awaitable[Any]]


def health_route(book: AsyncBook, call: Call) -> Route:
    """The ``/api/health`` route over ``book``; ``call`` runs a blocking read off the loop."""

    async def health(request: Request) -> Response:
        answer: SweepHealth = await call(sweep_health, book)
        return JSONResponse(
            answer.to_wire(),
            status_code=200 if answer.ok else 503,
            headers={"Cache-Control": "no-store"},
        )

    return Route(HEALTH_PATH, health)
