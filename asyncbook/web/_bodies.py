"""Request bodies, read with a bound, and the rule that refuses a change sent from another site."""

from __future__ import annotations

import json
from contextlib import aclosing
from typing import Any
from urllib.parse import urlsplit

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from ..errors import invalid
from ._responses import error_response

__all__ = ["cross_site", "read_body", "read_json_object", "refuse_cross_site"]

_JSON_TYPES = ("application/json",)


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 once it passes ``limit`` bytes.

    The declared length is checked before anything is read, and a body without one is
    read only up to the limit: a large request costs the server ``limit`` bytes at most.
    """
    too_large = HTTPException(
        413, f"the request body is larger than {limit} bytes", headers={"Connection": "close"}
    )
    declared = request.headers.get("content-length", "0")
    if not (declared.isascii() and declared.isdigit()) or int(declared) > limit:
        raise too_large
    body = bytearray()
    async with aclosing(request.stream()) as chunks:
        async for chunk in chunks:
            body += chunk
            if len(body) > limit:
                raise too_large
    return bytes(body)


def _is_json(content_type: str | None) -> bool:
    if content_type is None:
        return True  # a client that names no type is taken at its word: JSON
    media = content_type.split(";", 1)[0].strip().lower()
    return media in _JSON_TYPES or (media.startswith("application/") and media.endswith("+json"))


async def read_json_object(
    request: Request, limit: int, fields: frozenset[str]
) -> dict[str, Any] | Response:
    """A small JSON object body with only ``fields`` (an empty body is ``{}``).

    Answers (returns) 415 for a body that is not sent as JSON; raises 413 past ``limit``
    bytes and 400 (field ``body``) for anything but such an object.
    """
    body = await read_body(request, limit)
    if not body.strip(b" \t\r\n"):
        return {}
    if not _is_json(request.headers.get("content-type")):
        return error_response(
            415,
            "unsupported-media-type",
            "the body must be JSON: send it with Content-Type: application/json",
            "body",
        )
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise invalid("the body must be a JSON object in UTF-8", field="body") from None
    if not isinstance(data, dict):
        raise invalid("the body must be a JSON object", field="body")
    unknown = sorted(set(data) - fields)
    if unknown:
        allowed = ", ".join(sorted(fields)) or "none"
        name = unknown[0] if len(unknown[0]) <= 40 else unknown[0][:40] + "…"
        raise invalid(f"unknown field {name!r} (allowed: {allowed})", field="body")
    return data


def cross_site(request: Request) -> bool:
    """True when a browser says the request comes from another site.

    ``Sec-Fetch-Site`` when the browser sends it, else ``Origin`` against ``Host``;
    a client that sends neither is no browser on another site.
    """
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None:
        return fetch_site not in ("same-origin", "none")
    origin = request.headers.get("origin")
    if origin is None:
        return False
    try:
        netloc = urlsplit(origin).netloc
    except ValueError:  # "http://[x": no origin this server could have
        return True
    return netloc.lower() != request.headers.get("host", "").lower()


def refuse_cross_site(what: str = "this form") -> Response:
    """403 ``cross-site``: a browser sent ``what`` from another site."""
    return error_response(403, "cross-site", f"refused: {what} was sent from another site")
