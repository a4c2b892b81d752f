"""The API's error shape, ``{"code", "message", "field"?}``, for every refusal."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.responses import JSONResponse

__all__ = ["error_response"]


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
