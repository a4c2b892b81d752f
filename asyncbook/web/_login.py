"""The page's sign-in: ``/login`` and ``/logout``, a signed session cookie, and their limits.

The cookie is Starlette's ``SessionMiddleware`` (signed with itsdangerous) holding only
``{"signedIn": true, "role": "read" | "operator", "sid": ...}``: the role of the token
signed in with, and a random session id that the server keeps (``_session_store``) until
sign-out, so a copy of the cookie ends with the session. Its key is derived from the
tokens (``session_secret``), so no token reaches a cookie and a restart with the same
tokens keeps browsers signed in (on a Redis book, whose Redis keeps the sessions).

A wrong token is counted per client address (``FailureThrottle``); the right one is
checked first and always signs in.
"""

from __future__ import annotations

import html
from typing import Any
from urllib.parse import parse_qs, urlsplit

from starlette.concurrency import run_in_threadpool
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import invalid
from ._access import AccessRules, Role
from ._auth import COOKIE, session_secret, token_matches
from ._bodies import cross_site, read_body, refuse_cross_site
from ._pages import read_page
from ._session_store import SESSION_SECONDS, SessionStore, new_session_id
from ._throttle import FailureThrottle, client_address

__all__ = [
    "LOGIN_BODY_LIMIT",
    "SESSION_SECONDS",
    "Login",
    "LoginThrottle",
    "SESSION_ID",
    "Sessions",
    "read_form",
    "safe_next",
]

LOGIN_BODY_LIMIT = 8192
"""Largest sign-in form body, in bytes; a larger one is refused (413) before it is read."""
MAX_FIELDS = 16
SESSION_ID = "sid"
"""The session's key for its id, which the server's ``SessionStore`` keeps while it lives."""
LoginThrottle = FailureThrottle
"""The throttle of failed sign-ins (and bearer tokens): ``FailureThrottle``."""


class Sessions:
    """``SessionMiddleware`` keyed from the tokens, its cookie ``Secure`` over https.

    Whether a request is https is decided per request (``scope["scheme"]``, which
    uvicorn sets from ``X-Forwarded-Proto`` only when proxy headers are trusted).
    """

    def __init__(self, app: ASGIApp, token: str | None, read_token: str | None = None) -> None:
        options: dict[str, Any] = {
            "secret_key": session_secret(token, read_token),
            "session_cookie": COOKIE,
            "max_age": SESSION_SECONDS,
            "same_site": "lax",
        }
        self.plain = SessionMiddleware(app, **options)
        self.secure = SessionMiddleware(app, https_only=True, **options)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        https = scope.get("scheme") in ("https", "wss")
        await (self.secure if https else self.plain)(scope, receive, send)


async def read_form(request: Request, limit: int) -> dict[str, str]:
    """A small url-encoded form, refused with 413 once it passes ``limit`` bytes
    (``read_body``: the declared length first, then no more than ``limit`` is read)."""
    body = await read_body(request, limit)
    try:
        fields = parse_qs(body.decode("utf-8", errors="replace"), max_num_fields=MAX_FIELDS)
    except ValueError:
        raise invalid(f"a form has at most {MAX_FIELDS} fields", field="body") from None
    return {name: values[0] for name, values in fields.items()}


def safe_next(value: str | None) -> str:
    """``value`` when it is a path on this site (``/task?id=x``), otherwise ``/``.

    Never another site: ``//host``, ``/\\host``, a scheme, or control characters (which
    browsers drop, turning ``/\\t/host`` into ``//host``) all give ``/``.
    """
    if not value or not value.startswith("/") or value.startswith("//"):
        return "/"
    if "\\" in value or any(ord(char) < 0x20 or char == "\x7f" for char in value):
        return "/"
    parts = urlsplit(value)
    if parts.scheme or parts.netloc:
        return "/"
    return value


async def _page(next_page: str, message: str = "", status: int = 200, **headers: str) -> Response:
    text = await run_in_threadpool(read_page, "login.html")
    text = text.replace("{{next}}", html.escape(next_page)).replace(
        "{{message}}", html.escape(message)
    )
    return HTMLResponse(text, status, headers=headers or None)


def _role_of(given: str | None, rules: AccessRules) -> Role | None:
    """The role ``given`` signs in with (either token, both compared), or None."""
    operator = rules.token is not None and token_matches(given, rules.token)
    reader = rules.read_token is not None and token_matches(given, rules.read_token)
    return Role.OPERATOR if operator else Role.READ if reader else None


class Login:
    """``GET /login`` (the form), ``POST /login`` (sign in with either token: the
    session gets its role and an id ``sessions`` keeps) and ``POST /logout`` (the
    session ends: its cookie, and every copy of it, reads no more), for a server with a
    token."""

    def __init__(
        self, rules: AccessRules, throttle: FailureThrottle, sessions: SessionStore
    ) -> None:
        self.rules = rules
        self.throttle = throttle
        self.sessions = sessions

    async def login(self, request: Request) -> Response:
        """The form on GET; on POST, sign in (a session cookie) and go to ``next``.

        The token is checked first: the right one always signs in. A wrong one is
        counted per client address, and answered 429 (``Retry-After``) once that
        address has failed too often, else 401.
        """
        if request.method != "POST":
            return await _page(safe_next(request.query_params.get("next")))
        if cross_site(request):
            return refuse_cross_site()
        form = await read_form(request, LOGIN_BODY_LIMIT)
        next_page = safe_next(form.get("next"))
        role = _role_of(form.get("token"), self.rules)
        client = client_address(request.scope)
        if role is None:
            wait = self.throttle.failed(client)
            if wait:
                message = f"Too many attempts: try again in {wait} s."
                return await _page(next_page, message, 429, **{"Retry-After": str(wait)})
            return await _page(next_page, "That token is not valid.", 401)
        self.throttle.succeeded(client)
        await self._end(request)
        session_id = new_session_id()
        await self.sessions.add(session_id)
        request.session.clear()
        request.session["signedIn"] = True
        request.session["role"] = str(role)
        request.session[SESSION_ID] = session_id
        return RedirectResponse(next_page, status_code=303)

    async def logout(self, request: Request) -> Response:
        """End the session (server-side too), back to the form."""
        if cross_site(request):
            return refuse_cross_site()
        await self._end(request)
        request.session.clear()
        return RedirectResponse("/login", status_code=303)

    async def _end(self, request: Request) -> None:
        session_id = request.session.get(SESSION_ID)
        if isinstance(session_id, str):
            await self.sessions.end(session_id)
