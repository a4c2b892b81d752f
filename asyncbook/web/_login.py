"""The page's sign-in: ``/login`` and ``/logout``, a signed session cookie, and their limits.

The cookie is Starlette's ``SessionMiddleware`` (signed with itsdangerous) holding only
``{"signedIn": true, "role": "read" | "operator"}``: the role of the token signed in with.
Its key is derived from the tokens (``session_secret``), so no token reaches a cookie and
a restart with the same tokens keeps browsers signed in.
"""

from __future__ import annotations

import html
import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable
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

__all__ = [
    "LOGIN_BODY_LIMIT",
    "SESSION_SECONDS",
    "Login",
    "LoginThrottle",
    "Sessions",
    "read_form",
    "safe_next",
]

LOGIN_BODY_LIMIT = 8192
"""Largest sign-in form body, in bytes; a larger one is refused (413) before it is read."""
SESSION_SECONDS = 7 * 24 * 3600
MAX_FIELDS = 16


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


class LoginThrottle:
    """At most ``failures`` sign-in attempts that did not succeed, per address per ``window``.

    Memory is bounded: ``clients`` addresses at most (the one that failed longest ago is
    forgotten first), each with at most ``failures`` times.
    """

    def __init__(
        self,
        failures: int = 10,
        window: float = 60.0,
        clients: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.failures = failures
        self.window = window
        self.clients = clients
        self.clock = clock
        self._times: OrderedDict[str, deque[float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._times)

    def retry_after(self, client: str) -> int:
        """Seconds until ``client`` may try again; 0 when it may now."""
        times = self._times.get(client)
        if times is None:
            return 0
        now = self.clock()
        while times and times[0] <= now - self.window:
            times.popleft()
        if not times:
            del self._times[client]
            return 0
        if len(times) < self.failures:
            return 0
        return max(1, math.ceil(times[0] + self.window - now))

    def attempt(self, client: str) -> None:
        """Count an attempt before it is checked (so parallel guesses count too)."""
        times = self._times.setdefault(client, deque(maxlen=self.failures))
        times.append(self.clock())
        self._times.move_to_end(client)
        while len(self._times) > self.clients:
            self._times.popitem(last=False)

    def succeeded(self, client: str) -> None:
        """Forget ``client``'s attempts: it signed in."""
        self._times.pop(client, None)


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


def _client(request: Request) -> str:
    return request.client.host if request.client is not None else ""


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
    session gets its role) and ``POST /logout``, for a server with a token."""

    def __init__(self, rules: AccessRules, throttle: LoginThrottle) -> None:
        self.rules = rules
        self.throttle = throttle

    async def login(self, request: Request) -> Response:
        """The form on GET; on POST, sign in (a session cookie) and go to ``next``."""
        if request.method != "POST":
            return await _page(safe_next(request.query_params.get("next")))
        if cross_site(request):
            return refuse_cross_site()
        client = _client(request)
        wait = self.throttle.retry_after(client)
        if wait:
            message = f"Too many attempts: try again in {wait} s."
            next_page = safe_next(request.query_params.get("next"))
            return await _page(next_page, message, 429, **{"Retry-After": str(wait)})
        self.throttle.attempt(client)
        form = await read_form(request, LOGIN_BODY_LIMIT)
        next_page = safe_next(form.get("next"))
        role = _role_of(form.get("token"), self.rules)
        if role is None:
            return await _page(next_page, "That token is not valid.", 401)
        self.throttle.succeeded(client)
        request.session.clear()
        request.session["signedIn"] = True
        request.session["role"] = str(role)
        return RedirectResponse(next_page, status_code=303)

    async def logout(self, request: Request) -> Response:
        """End the session, back to the form."""
        if cross_site(request):
            return refuse_cross_site()
        request.session.clear()
        return RedirectResponse("/login", status_code=303)
