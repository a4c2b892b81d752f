"""``GET /api/health``: whether the expiry sweep runs, for probes, uptime checks and the
page's banner.

200 while healthy, 503 while tasks are overdue and no sweep ran for 30 s: the status
codes load balancers, Kubernetes probes and uptime checkers read. The body is the same
JSON either way (``SweepHealth.to_wire``). Open like ``/metrics`` (no token): it tells
counts, never a task.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .._health import SILENT_MS, SweepHealth
from ._reader import Reader

__all__ = ["HEALTH_PATH", "Unconsumed", "health_handler", "read_health"]

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


class Unconsumed(Protocol):
    """What tells the queues no online worker consumes (``QueuesApi``)."""

    async def unconsumed(self) -> tuple[dict[str, int], list[str] | None] | None: ...

    async def stranded(self) -> dict[str, int] | None: ...


def health_handler(
    reader: Reader, queues: Unconsumed | None = None
) -> Callable[[Request], Awaitable[Response]]:
    """The ``/api/health`` handler, reading the book through ``reader``; with ``queues``
    (a broker and the workers' records) the body names ``unconsumedQueues`` too: the
    queues whose ready messages no online worker consumes, and (a book with the console)
    ``strandedTasks``: per queue, the tracked tasks queued over 5 minutes that no online
    worker consumes (flags: the status code follows the sweep alone)."""

    async def health(request: Request) -> Response:
        answer = await read_health(reader)
        body = answer.to_wire()
        fleet = None if queues is None else await queues.unconsumed()
        if fleet is not None and fleet[1] is not None:
            body["unconsumedQueues"] = fleet[1]
        waiting = None if queues is None else await queues.stranded()
        if waiting is not None:
            body["strandedTasks"] = waiting
        return JSONResponse(
            body,
            status_code=200 if answer.ok else 503,
            headers={"Cache-Control": "no-store"},
        )

    return health
