"""The book's script calls straight on a pooled connection of a plain redis-py client.

``Redis.evalsha`` passes redis-py's command dispatch (the method, ``execute_command``,
response callbacks, OpenTelemetry timing). ``ScriptLane`` takes a connection from the
client's pool, sends EVALSHA (or FCALL) and reads the answer under the connection's retry
policy (a failed attempt disconnects, as the dispatch does) and gives it back: the same
bytes, the same answers and errors, a sixth fewer client instructions a call
(docs/benchmarks.md).

Only for a ``redis.Redis`` itself (not fakeredis's, not a Cluster client) without a
single connection or a client-side cache, on redis-py 5.3 or later. Each call, as these
can change at any time, the client's own method is called instead while redis-py's
observability is on or that method or ``execute_command`` is wrapped (an
instrumentation such as OpenTelemetry's, Sentry's or ddtrace's, a test's spy).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from types import FunctionType
from typing import Any

import redis
from redis._parsers.encoders import Encoder

__all__ = ["ScriptLane", "lane_for", "packed"]

try:
    from redis.observability.recorder import is_enabled as _observed
except ImportError:  # redis-py before 8 times no command

    def _observed() -> bool:
        return False


_hiredis_pack: Any = None
with contextlib.suppress(ImportError):  # else redis-py packs without hiredis
    from hiredis import pack_command as _hiredis_pack
_REDIS_PY = os.path.dirname(redis.__file__) + os.sep


def _unwrapped(client: redis.Redis, name: str) -> bool:
    """Whether ``client.<name>`` is redis-py's own function, wrapped by nobody."""
    method = getattr(type(client), name)
    # A wrapt proxy (OpenTelemetry, ddtrace) is no function; functools.wraps copies no code.
    return (
        name not in vars(client)
        and type(method) is FunctionType
        and method.__code__.co_filename.startswith(_REDIS_PY)
    )


def packed(connection: Any, *parts: Any) -> Any:
    """``parts`` as ``connection`` packs them, by one hiredis call where it uses hiredis."""
    packer = getattr(connection, "_command_packer", None)
    encoder: Any = getattr(getattr(packer, "_encode", None), "__self__", None)
    hiredis = type(packer).__name__ == "HiredisRespSerializer" and type(encoder) is Encoder
    if hiredis and _hiredis_pack and encoder.encoding in ("utf-8", "utf8"):
        return [_hiredis_pack(parts)]
    return connection.pack_command(*parts)


class ScriptLane:
    """EVALSHA or FCALL on one of ``client``'s pooled connections (see the module)."""

    __slots__ = ("client", "pool")

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.pool = client.connection_pool

    def direct(self, *methods: str) -> bool:
        """Whether a call may go straight to a connection now: redis-py's observability
        is off and ``methods`` and ``execute_command`` are the client's own (see the
        module)."""
        client = self.client
        return not _observed() and all(
            _unwrapped(client, name) for name in ("execute_command", *methods)
        )

    def call(self, method: str, target: bytes, texts: Sequence[Any], key_count: int) -> Any:
        """``method`` (evalsha, fcall, fcall_ro) of ``target`` (a SHA, a function) with
        ``texts`` (KEYS then ARGV), as the client's would: its answer, or its error."""
        if not self.direct(method):
            return getattr(self.client, method)(target, key_count, *texts)
        connection: Any = self.pool.get_connection()

        def attempt() -> Any:
            connection.send_packed_command(
                packed(connection, method.upper(), target, key_count, *texts)
            )
            return connection.read_response()

        try:
            return connection.retry.call_with_retry(attempt, lambda error: connection.disconnect())
        finally:
            self.pool.release(connection)


def lane_for(client: Any) -> ScriptLane | None:
    """A lane for ``client``, or None where its own ``evalsha`` is to be called."""
    if type(client) is not redis.Redis or client.connection is not None:
        return None
    if redis.VERSION < (5, 3) or getattr(client.connection_pool, "cache", None) is not None:
        return None
    return ScriptLane(client)
