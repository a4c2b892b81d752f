"""Tokens (their checks and constant-time comparison), the key that signs sessions, the
redirect to the sign-in form, and the rule that an open server listens on loopback only.
Who may do what is ``_access``."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import socket
from collections.abc import Iterable
from urllib.parse import urlencode

from starlette.types import Scope, Send

from ..errors import invalid

__all__ = [
    "COOKIE",
    "MIN_TOKEN_LENGTH",
    "bearer",
    "check_bind",
    "check_token",
    "is_loopback",
    "redirect_to_login",
    "session_secret",
    "token_matches",
]

COOKIE = "asyncbook_session"
"""The signed session cookie the sign-in form sets, so a browser's ``EventSource`` (no
headers) can stream; it holds ``{"signedIn": true, "role": ...}`` signed with
``session_secret``."""

MIN_TOKEN_LENGTH = 16
_SESSION_LABEL = b"asyncbook session cookie signing key v1"


def token_matches(given: str | bytes | None, token: str) -> bool:
    """Compare in constant time (no early exit on the first differing byte), as UTF-8:
    ``given`` is text (a form field) or the raw bytes of a header."""
    if given is None:
        return False
    raw = given if isinstance(given, bytes) else given.encode("utf-8", "surrogateescape")
    return hmac.compare_digest(raw, token.encode("utf-8", "surrogateescape"))


_OPTIONS = {
    "token": "--token / ASYNCBOOK_API_TOKEN",
    "read_token": "--read-token / ASYNCBOOK_READ_TOKEN",
}


def check_token(token: str | None, field: str = "token") -> None:
    """Refuse a token too short to be a secret (``AsyncBookError`` naming ``field``:
    ``token``, the operator's, or ``read_token``)."""
    if not token:
        return
    what = "API token" if field == "token" else "read token"
    if len(token) < MIN_TOKEN_LENGTH:
        raise invalid(
            f"the {what} must be at least {MIN_TOKEN_LENGTH} characters (a random secret, "
            f"e.g. `openssl rand -hex 32`): set a longer {_OPTIONS[field]}",
            field=field,
        )
    if not all(" " < char < "\x7f" for char in token):
        # A header carries it as bytes that clients send as UTF-8 or Latin-1 (Starlette
        # reads headers as Latin-1), and strips spaces: only visible ASCII is the same
        # token in every client's Authorization header.
        raise invalid(
            f"the {what} may hold only visible ASCII characters (no spaces, no accents), "
            f"so that every client sends it alike (e.g. `openssl rand -hex 32`): set "
            f"another {_OPTIONS[field]}",
            field=field,
        )


def session_secret(token: str | None, read_token: str | None = None) -> str:
    """The key that signs session cookies: derived from the tokens, never a token itself.

    The same tokens give the same key, so a signed-in browser stays signed in across a
    restart; a new token (either) ends every session. With the operator token alone the
    key is what it was before read tokens existed.
    """
    secret = token or ""
    if read_token:
        secret += "\0read:" + read_token
    return hmac.new(secret.encode("utf-8"), _SESSION_LABEL, hashlib.sha256).hexdigest()


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


def check_bind(host: str, guarded: object) -> None:
    """Refuse to listen beyond loopback unless ``guarded`` (a token, or access rules
    that are set): ``AsyncBookError``, field host."""
    if not guarded and not is_loopback(host):
        raise invalid(
            f"refusing to listen on {host!r} without a token: set ASYNCBOOK_API_TOKEN "
            "(or a trusted header) or bind a loopback address such as 127.0.0.1",
            field="host",
        )


def bearer(headers: Iterable[tuple[bytes, bytes]]) -> bytes | None:
    """The credentials of an ``Authorization: Bearer`` header (its raw bytes), or None."""
    for name, value in headers:
        if name == b"authorization":
            scheme, _, credentials = bytes(value).partition(b" ")
            if scheme.lower() == b"bearer":
                return credentials.strip()
    return None


async def redirect_to_login(scope: Scope, send: Send) -> None:
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
