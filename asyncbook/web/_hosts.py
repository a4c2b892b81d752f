"""Which ``Host`` names the server answers: its defence against DNS rebinding.

A page on any website can make a browser resolve the site's own name to 127.0.0.1 and
then read this server as same-origin. The browser still sends that site's name in
``Host``, so the server answers only its loopback names and the names it is told.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import invalid
from ._responses import error_response

__all__ = ["LOOPBACK_HOSTS", "HostCheck", "allowed_host_names"]

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")
_PASSED = "asyncbook.host_checked"


def _host_name(name: str) -> str:
    """One allowed name, lower case, IPv6 in brackets; refuses ports, paths and bad wildcards."""
    text = name.strip().lower()
    try:
        if ipaddress.ip_address(text.strip("[]")).version == 6:
            return f"[{text.strip('[]')}]"
    except ValueError:
        pass
    wildcard = text.startswith("*.") and "*" not in text[2:]
    plain = "*" not in text
    if text and (text == "*" or wildcard or plain) and not any(c in text for c in ":/@ \t"):
        return text
    raise invalid(
        f"allowed host {name!r} must be a host name such as status.example.com or "
        "*.example.com, without a port (--allowed-host, ASYNCBOOK_ALLOWED_HOSTS)",
        field="allowedHosts",
    )


def allowed_host_names(names: Iterable[str] = ()) -> list[str]:
    """The loopback names and ``names`` (checked), as ``HostCheck`` matches them."""
    extra = [_host_name(name) for name in names]
    return list(dict.fromkeys([*LOOPBACK_HOSTS, *extra]))


class HostCheck:
    """ASGI middleware: Starlette's ``TrustedHostMiddleware``, refusing in the API's JSON.

    The library decides (its parsing of ``Host``, ports and ``*.`` wildcards); this only
    turns its plain-text 400 into ``{"code": "host-not-allowed", "message"}``.
    """

    def __init__(self, app: ASGIApp, allowed_hosts: list[str]) -> None:
        self.app = app
        self.hosts = allowed_hosts
        self.check = TrustedHostMiddleware(self._passed, allowed_hosts, www_redirect=False)

    async def _passed(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope[_PASSED] = True
        await self.app(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.check(scope, receive, send)
            return

        async def refuse(message: Message) -> None:
            if scope.get(_PASSED):
                await send(message)
            elif message["type"] == "http.response.start":
                refusal = error_response(
                    400,
                    "host-not-allowed",
                    "this server does not answer for that Host: allow the name with "
                    "--allowed-host (ASYNCBOOK_ALLOWED_HOSTS)",
                    "Host",
                )
                await refusal(scope, receive, send)

        await self.check(scope, receive, refuse)
