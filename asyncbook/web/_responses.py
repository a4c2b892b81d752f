"""The API's error shape, ``{"code", "message", "field"?}``, for every refusal; and the
event streams' response, at most ``StreamSlots.limit`` open at once."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

__all__ = ["MAX_STREAMS", "StreamSlots", "error_response"]

MAX_STREAMS = 1_000
"""Event streams a server holds open at once, by default (``create_app(max_streams=)``)."""
_RETRY_SECONDS = "5"


def error_response(
    status: int,
    code: str,
    message: str,
    field: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    """The API's error shape: ``{"code", "message"}`` (and ``field`` when one is to blame)."""
    body: dict[str, Any] = {"code": code, "message": message}
    if field is not None:
        body["field"] = field
    return JSONResponse(body, status_code=status, headers=headers)


class StreamSlots:
    """The event streams this server holds open (each a follower: a task's versions, its
    output, a group, the feed), at most ``limit``: one more is answered 503 with
    ``Retry-After``, so clients holding streams cannot exhaust the server."""

    def __init__(self, limit: int = MAX_STREAMS) -> None:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ValueError(f"max_streams must be an integer >= 1, not {limit!r}")
        self.limit = limit
        self.open = 0

    def response(self, body: AsyncIterator[bytes]) -> Response:
        """``body`` as an event stream holding a slot until it ends; 503 when none is free."""
        if self.open >= self.limit:
            return error_response(
                503,
                "unavailable",
                f"{self.limit} event streams are open, the most this server holds: retry later",
                headers={"Retry-After": _RETRY_SECONDS},
            )
        self.open += 1
        return _HeldStream(self, body)


class _HeldStream(StreamingResponse):
    """An event stream that gives its slot back once it is over (sent, or the client gone)."""

    def __init__(self, slots: StreamSlots, body: AsyncIterator[bytes]) -> None:
        headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
        super().__init__(body, media_type="text/event-stream", headers=headers)
        self._slots = slots

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._slots.open -= 1
