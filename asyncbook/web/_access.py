"""Who may do what: the read and operator roles, how a request is given one (a bearer
token, the sign-in cookie, or a trusted proxy's header), and the one rule every change
obeys.

A request is a ``Principal`` (an actor name for the audit trail and a role) or nobody:

- ``Authorization: Bearer`` with the operator token (``--token``) is ``token:operator``,
  with the read token (``--read-token``) ``token:read``;
- from a trusted proxy (the ASGI client address within ``--trusted-proxy``), the
  ``--trusted-header`` names the user: an operator when listed in ``--operators``,
  else a reader. From any other address that header is ignored;
- the sign-in cookie (GET and HEAD only) carries the role it was signed in with, while
  its session lives (``SessionStore``: sign-out ends it, copies of the cookie included).

A wrong bearer token is counted per client address with the failed sign-ins
(``FailureThrottle``): past the limit it is answered 429, never the right token.

The rule (``Access``): a change — any method but GET and HEAD on a path that is not
open — needs the operator role from the token or the trusted header, never from the
cookie alone; a read role gets 403 naming the role it needs, and a change sent from
another site 403 ``cross-site`` (a proxy's own sign-in travels with a cross-site form).
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from .._audit import require_actor
from ..errors import AsyncBookError, BookUnavailableError, invalid
from ._auth import bearer, check_token, redirect_to_login, token_matches
from ._bodies import cross_site, refuse_cross_site
from ._session_store import SessionStore
from ._throttle import FailureThrottle, client_address

__all__ = [
    "PRINCIPAL",
    "Access",
    "AccessRules",
    "Network",
    "Principal",
    "Role",
    "actor_of",
    "principal_of",
]

PRINCIPAL = "asyncbook.principal"
"""The ASGI scope key ``Access`` puts the request's ``Principal`` under."""
OPEN_ACTOR = "anonymous"
"""The actor of a change on a server without any access rule (loopback only)."""

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class Role(StrEnum):
    """What a principal may do: ``read`` (pages, API reads, streams, metrics, the audit)
    or ``operator`` (that, and changes: cancel, resend, delivery)."""

    READ = "read"
    OPERATOR = "operator"


@dataclass(frozen=True)
class Principal:
    """Who a request is: ``actor`` as the audit trail names them, their ``role``, and
    whether only the sign-in cookie says so (``by_cookie``: never enough for a change)."""

    actor: str
    role: Role
    by_cookie: bool = False


def _networks(values: Iterable[str]) -> tuple[Network, ...]:
    found: list[Network] = []
    for value in values:
        try:
            found.append(ipaddress.ip_network(value.strip(), strict=False))
        except ValueError:
            raise invalid(
                f"--trusted-proxy {value!r} is not an IP address or CIDR (10.0.0.5, 10.0.0.0/24)",
                field="trusted_proxy",
            ) from None
    return tuple(found)


def _header_name(value: str | None) -> bytes | None:
    if value is None or not value.strip():
        return None
    name = value.strip()
    if not name.isascii() or not all(c.isalnum() or c == "-" for c in name):
        raise invalid(
            f"--trusted-header {value!r} is not a header name (X-Forwarded-User)",
            field="trusted_header",
        )
    return name.lower().encode("ascii")


@dataclass(frozen=True)
class AccessRules:
    """A server's access rules; ``of`` checks them and refuses what cannot be right."""

    token: str | None = None
    """The operator token (full access)."""
    read_token: str | None = None
    header: bytes | None = None
    """The trusted header's name, lowercase."""
    proxies: tuple[Network, ...] = ()
    operators: frozenset[str] = frozenset()

    @classmethod
    def of(
        cls,
        token: str | None = None,
        read_token: str | None = None,
        trusted_header: str | None = None,
        trusted_proxies: Iterable[str] = (),
        operators: Iterable[str] = (),
    ) -> AccessRules:
        """The rules, checked: tokens long enough and different, a trusted header only
        with the proxies allowed to send it (``AsyncBookError`` naming the option)."""
        check_token(token, "token")
        check_token(read_token, "read_token")
        if token and read_token and token_matches(read_token, token):
            raise invalid("the read token must differ from the operator token", field="read_token")
        header = _header_name(trusted_header)
        proxies = _networks(trusted_proxies)
        if header is not None and not proxies:
            raise invalid(
                "--trusted-header needs --trusted-proxy: the addresses of the proxies allowed "
                "to send it (a header from anyone else would name any user)",
                field="trusted_proxy",
            )
        names = frozenset(name.strip() for name in operators if name.strip())
        return cls(token or None, read_token or None, header, proxies, names)

    @property
    def enabled(self) -> bool:
        """True when any rule is set (a token or a trusted header): requests need one."""
        return bool(self.token or self.read_token or self.header)

    @property
    def signin(self) -> bool:
        """True when the sign-in form is served: the server has a token."""
        return bool(self.token or self.read_token)

    def principal(self, scope: Scope) -> Principal | None:
        """Who the request is, or None (``Access`` has the rules of precedence)."""
        user = self._header_user(scope)
        if user is not None:
            role = Role.OPERATOR if user in self.operators else Role.READ
            return Principal(user, role)
        given = bearer(scope["headers"])
        if given is not None:
            # Both compared, in constant time, whichever matches.
            operator = self.token is not None and token_matches(given, self.token)
            reader = self.read_token is not None and token_matches(given, self.read_token)
            if operator:
                return Principal("token:operator", Role.OPERATOR)
            if reader:
                return Principal("token:read", Role.READ)
        session = scope.get("session")
        if isinstance(session, dict) and session.get("signedIn") is True and "sid" in session:
            role = Role.READ if session.get("role") == Role.READ else Role.OPERATOR
            return Principal(f"session:{role}", role, by_cookie=True)
        return None

    def _from_proxy(self, scope: Scope) -> bool:
        client = scope.get("client")
        if not client:
            return False
        try:
            address = ipaddress.ip_address(str(client[0]))
        except ValueError:
            return False
        return any(address in network for network in self.proxies)

    def _header_user(self, scope: Scope) -> str | None:
        if self.header is None or not self._from_proxy(scope):
            return None
        for name, value in scope["headers"]:
            if name == self.header:
                try:
                    return require_actor(bytes(value).decode("utf-8").strip())
                except (UnicodeDecodeError, AsyncBookError):
                    return None
        return None


def principal_of(request: Request) -> Principal | None:
    """The request's principal as ``Access`` found it (None on an open server)."""
    found = request.scope.get(PRINCIPAL)
    return found if isinstance(found, Principal) else None


def actor_of(request: Request) -> str:
    """Who made a change, for the audit trail: the principal's actor, or ``anonymous``
    on a server without access rules."""
    principal = principal_of(request)
    return OPEN_ACTOR if principal is None else principal.actor


@dataclass(eq=False)
class Access:
    """ASGI middleware: every path but the open ones needs a principal, and a change
    needs the operator role (the module's docstring has the rules).

    The page's static assets (style and script, nothing secret) are open too. A page
    asked for by nobody redirects to the sign-in form (when the server has a token),
    which comes back to it.
    """

    app: ASGIApp
    rules: AccessRules
    open_paths: frozenset[str]
    page_paths: frozenset[str] = frozenset()
    page_prefixes: tuple[str, ...] = ()
    sessions: SessionStore | None = None
    throttle: FailureThrottle | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        principal = self.rules.principal(scope)
        scope[PRINCIPAL] = principal
        if path in self.open_paths or path.startswith("/static/"):
            await self.app(scope, receive, send)
            return
        if principal is not None and principal.by_cookie:
            try:
                alive = await self._alive(scope)
            except BookUnavailableError as error:
                await _refuse(send, 503, "unavailable", str(error))
                return
            if not alive:
                principal = scope[PRINCIPAL] = None  # signed out: the cookie is a stale copy
        if self.throttle is not None and self._wrong_bearer(scope, principal):
            wait = self.throttle.failed(client_address(scope))
            if wait:
                message = f"too many wrong tokens from this address: try again in {wait} s"
                await _refuse(send, 429, "too-many-attempts", message, retry_after=wait)
                return
        change = scope["method"] not in ("GET", "HEAD")
        if principal is None or (change and principal.by_cookie):
            page = path in self.page_paths or path.startswith(self.page_prefixes)
            if not change and page and self.rules.signin:  # no tokens: no sign-in form
                await redirect_to_login(scope, send)
                return
            await _refuse(send, 401, "unauthorized", "a valid bearer token is required")
            return
        if change and principal.role is not Role.OPERATOR:
            message = f"this change needs the operator role; {principal.actor} has the read role"
            await _refuse(send, 403, "forbidden", message, role=Role.OPERATOR)
            return
        if change and cross_site(Request(scope)):
            await refuse_cross_site("this change")(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _alive(self, scope: Scope) -> bool:
        """Whether the cookie's session still lives (not signed out)."""
        session_id = scope["session"].get("sid")
        if not isinstance(session_id, str):
            return False
        return self.sessions is None or await self.sessions.alive(session_id)

    def _wrong_bearer(self, scope: Scope, principal: Principal | None) -> bool:
        """A bearer token was given and it is neither token (a trusted header's user
        ignores it)."""
        if principal is not None and not principal.by_cookie:
            return False
        return bearer(scope["headers"]) is not None


async def _refuse(
    send: Send, status: int, code: str, message: str, role: str = "", retry_after: int = 0
) -> None:
    body: dict[str, str] = {"code": code, "message": message}
    headers = [(b"content-type", b"application/json")]
    if role:
        body["role"] = role
    if retry_after:
        headers.append((b"retry-after", str(retry_after).encode()))
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="asyncbook"'))
    start = {"type": "http.response.start", "status": status, "headers": headers}
    await send(start)
    await send({"type": "http.response.body", "body": json.dumps(body).encode()})
