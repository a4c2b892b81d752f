"""Bearer-token access, and the rule that an open server listens on loopback only."""

from __future__ import annotations

import hmac
import ipaddress
import json
import socket
from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import invalid

__all__ = ["COOKIE", "TokenAuth", "check_bind", "is_loopback", "token_matches"]

COOKIE = "asyncbook_token"
"""Cookie the page login sets, so a browser's ``EventSource`` (no headers) can stream."""


def token_matches(given: str | None, token: str) -> bool:
    """Compare in constant time (no early exit on the first differing byte)."""
    if given is None:
        return False
    return hmac.compare_digest(given.encode("utf-8"), token.encode("utf-8"))


def is_loopback(host: str) -> bool:
    """True when every address ``host`` names is a loopback address."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except (OSError, UnicodeError):
        return False
    addresses = {str(info[4][0]) for info in infos}
    return bool(addresses) and all(ipaddress.ip_address(a).is_loopback for a in addresses)


def check_bind(host: str, token: str | None) -> None:
    """Refuse to listen beyond loopback without a token (``AsyncBookError``, field host)."""
    if not token and not is_loopback(host):
        raise invalid(
            f"refusing to listen on {host!r} without a token: set ASYNCBOOK_API_TOKEN "
            "or bind a loopback address such as 127.0.0.1",
            field="host",
        )


def _bearer(headers: Iterable[tuple[bytes, bytes]]) -> tuple[str | None, str | None]:
    bearer = cookie = None
    for name, value in headers:
        if name == b"authorization":
            scheme, _, credentials = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer":
                bearer = credentials.strip()
        elif name == b"cookie":
            for part in value.decode("latin-1").split(";"):
                key, _, item = part.strip().partition("=")
                if key == COOKIE:
                    cookie = item
    return bearer, cookie


class TokenAuth:
    """ASGI middleware: a matching bearer token on every path but the open ones.

    The page's static assets (style and script, nothing secret) are open too.

    Safe methods also accept the login cookie, so the page and its streams work in a
    browser; a POST needs the header, which a cross-site form cannot send.
    """

    def __init__(
        self,
        app: ASGIApp,
        token: str,
        open_paths: frozenset[str],
        page_paths: frozenset[str] = frozenset(),
    ) -> None:
        self.app = app
        self.token = token
        self.open_paths = open_paths
        self.page_paths = page_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or path in self.open_paths or path.startswith("/static/"):
            await self.app(scope, receive, send)
            return
        bearer, cookie = _bearer(scope["headers"])
        allowed = token_matches(bearer, self.token) or (
            scope["method"] in ("GET", "HEAD") and token_matches(cookie, self.token)
        )
        if allowed:
            await self.app(scope, receive, send)
            return
        if scope["path"] in self.page_paths:
            start = {
                "type": "http.response.start",
                "status": 303,
                "headers": [(b"location", b"/login")],
            }
            await send(start)
            await send({"type": "http.response.body", "body": b""})
            return
        body = json.dumps({"code": "unauthorized", "message": "a valid bearer token is required"})
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"www-authenticate", b'Bearer realm="asyncbook"'),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body.encode()})
