"""Which server a book runs on, and whether it can run the book (checked once).

The book needs server-side Lua (EVAL) and the commands of Redis 7.0 (``ZADD ... GT``,
``XADD ... MINID``); Valkey forked Redis 7.2, and is tested from 8.1 on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import UnsupportedServerError

__all__ = ["MINIMUM_VERSIONS", "ServerInfo", "require_supported", "server_info"]

MINIMUM_VERSIONS: dict[str, tuple[int, int]] = {"redis": (7, 0), "valkey": (8, 1)}
"""The lowest tested version of each server kind."""

PROBE_SCRIPT = "return 1"
"""What the first-use check evaluates to learn whether the server runs scripts."""

_NO_SCRIPTING = ("unknown command", "scripting engine", "scripting disabled", "not supported")


@dataclass(frozen=True)
class ServerInfo:
    """The server's kind (``redis``, ``valkey`` or another ``server_name``) and version."""

    kind: str
    version: str

    def __str__(self) -> str:
        return f"{self.kind} {self.version}"


def server_info(info: Mapping[str, Any]) -> ServerInfo:
    """The server named by an ``INFO server`` answer (Valkey also reports the Redis
    version it is compatible with, as ``redis_version``)."""
    kind = str(info.get("server_name") or "redis").lower()
    version = info.get(f"{kind}_version") or info.get("redis_version") or ""
    return ServerInfo(kind, str(version))


def require_supported(server: ServerInfo | None, probe_error: Exception | None) -> None:
    """Raise ``UnsupportedServerError`` when the server cannot run the book.

    ``server`` is None when INFO was refused (an embedded server, a restricted user):
    the version is then not known, and only scripting is checked. ``probe_error`` is
    what ``EVAL PROBE_SCRIPT`` answered, when it failed.
    """
    name = str(server) if server is not None else "a server that refused INFO"
    if probe_error is not None and any(text in str(probe_error).lower() for text in _NO_SCRIPTING):
        raise UnsupportedServerError(
            name, f"it runs no Lua scripts (EVAL answered {str(probe_error)!r})"
        )
    if server is None:
        return
    least = MINIMUM_VERSIONS.get(server.kind)
    found = tuple(int(part) for part in re.findall(r"\d+", server.version)[:2])  # major, minor
    if least is not None and found and found < least:
        wanted = ".".join(map(str, least))
        raise UnsupportedServerError(name, f"it is older than {server.kind} {wanted}")
