"""Bearer-token access, the key that signs sessions, and the rule that an open server
listens on loopback only."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import socket
from collections.abc import Iterable
from urllib.parse import urlencode

from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import invalid

__all__ = [
    "COOKIE",
    "MIN_TOKEN_LENGTH",
    "TokenAuth",
    "check_bind",
    "check_token",
    "is_loopback",
    "session_secret",
    "signed_in",
    "token_matches",
]

COOKIE = "asyncbook_session"
"""The signed session cookie the sign-in form sets, so a browser's ``EventSource`` (no
headers) can stream; it holds ``{"signedIn": true}`` signed with ``session_secret``."""

MIN_TOKEN_LENGTH = 16
_SESSION_LABEL = b"asyncbook session cookie signing key v1"


def token_matches(given: str | None, token: str) -> bool:
    """Compare in constant time (no early exit on the first differing byte)."""
    if given is None:
        return False
    return hmac.compare_digest(given.encode("utf-8"), token.encode("utf-8"))


def check_token(token: str | None) -> None:
    """Refuse a token too short to be a secret (``AsyncBookError``, field token)."""
    if token and len(token) < MIN_TOKEN_LENGTH:
        raise invalid(
            f"the API token must be at least {MIN_TOKEN_LENGTH} characters (a random secret, "
            "e.g. `openssl rand -hex 32`): set a longer --token / ASYNCBOOK_API_TOKEN",
            field="token",
        )


def session_secret(token: str) -> str:
    """The key that signs session cookies: derived from the token, never the token itself.

    The same token gives the same key, so a signed-in browser stays signed in across a
    restart; a new token ends every session.
    """
    return hmac.new(token.encode("utf-8"), _SESSION_LABEL, hashlib.sha256).hexdigest()


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


def _bearer(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    for name, value in headers:
        if name == b"authorization":
            scheme, _, credentials = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer":
                return credentials.strip()
    return None


def signed_in(scope: Scope) -> bool:
    """True when the request carries a valid session cookie from the sign-in form."""
    session = scope.get("session")
    return isinstance(session, dict) and session.get("signedIn") is True


class TokenAuth:
    """ASGI middleware: a matching bearer token on every path but the open ones.

    The page's static assets (style and script, nothing secret) are open too.

    Safe methods also accept the signed session cookie (the sign-in form's), so the page
    and its streams work in a browser; a POST needs the header, which a cross-site form
    cannot send, so the cookie never authorizes a change. A page asked for without either
    redirects to the sign-in form, which comes back to it.
    """

    def __init__(
        self,
        app: ASGIApp,
        token: str,
        open_paths: frozenset[str],
        page_paths: frozenset[str] = frozenset(),
        page_prefixes: tuple[str, ...] = (),
    ) -> None:
        self.app = app
        self.token = token
        self.open_paths = open_paths
        self.page_paths = page_paths
        self.page_prefixes = page_prefixes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or path in self.open_paths or path.startswith("/static/"):
            await self.app(scope, receive, send)
            return
        allowed = token_matches(_bearer(scope["headers"]), self.token) or (
            scope["method"] in ("GET", "HEAD") and signed_in(scope)
        )
        if allowed:
            await self.app(scope, receive, send)
            return
        if path in self.page_paths or path.startswith(self.page_prefixes):
            await _redirect_to_login(scope, send)
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


async def _redirect_to_login(scope: Scope, send: Send) -> None:
    """303 to the sign-in form, with ``next`` naming this page unless it is ``/``.

    The page is named as the client sent it (still percent-encoded), so a group page's
    id (``/groups/a%2Fb``) comes back the same.
    """
    raw = scope.get("raw_path")
    page = bytes(raw).split(b"?", 1)[0].decode("latin-1") if raw else scope["path"]
    if scope.get("query_string"):
        page += "?" + scope["query_string"].decode("latin-1")
    location = "/login" if page == "/" else "/login?" + urlencode({"next": page})
    start = {
        "type": "http.response.start",
        "status": 303,
        "headers": [(b"location", location.encode())],
    }
    await send(start)
    await send({"type": "http.response.body", "body": b""})
