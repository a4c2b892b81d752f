"""``async_client_like``: an asyncio client to the server a redis-py client talks to,
with the same connection settings (``AsyncRedisBook.twin_of`` builds on it)."""

from __future__ import annotations

from typing import Any

import redis
import redis.asyncio

from ._connection import async_retry_policy

__all__ = ["CONNECTION_SETTINGS", "async_client_like"]

_CONNECTIONS: dict[type[Any], type[Any]] = {
    redis.Connection: redis.asyncio.Connection,
    redis.SSLConnection: redis.asyncio.SSLConnection,
    redis.UnixDomainSocketConnection: redis.asyncio.UnixDomainSocketConnection,
}
CONNECTION_SETTINGS = (
    "host",
    "port",
    "path",
    "db",
    "username",
    "password",
    "credential_provider",
    "socket_timeout",
    "socket_connect_timeout",
    "socket_keepalive",
    "encoding",
    "encoding_errors",
    "decode_responses",
    "client_name",
    "health_check_interval",
    "protocol",
    "ssl_keyfile",
    "ssl_certfile",
    "ssl_cert_reqs",
    "ssl_ca_certs",
    "ssl_ca_data",
    "ssl_check_hostname",
    "ssl_min_version",
    "ssl_ciphers",
)
"""Connection settings that mean the same to redis-py and ``redis.asyncio``."""


def async_client_like(client: Any) -> Any | None:
    """A ``redis.asyncio`` client like ``client`` (address, db, credentials, TLS,
    timeouts, as many retries); None when ``client`` is not a plain redis-py ``Redis`` on
    a plain pool (a Cluster, Sentinel, fakeredis...)."""
    if type(client) is not redis.Redis or type(client.connection_pool) is not redis.ConnectionPool:
        return None
    pool = client.connection_pool
    connection = _CONNECTIONS.get(pool.connection_class)
    if connection is None:
        return None
    given = pool.connection_kwargs
    settings = {name: given[name] for name in CONNECTION_SETTINGS if name in given}
    retry = given.get("retry")
    settings["retry"] = async_retry_policy(_retries_of(retry))
    twin_pool = redis.asyncio.ConnectionPool(
        connection_class=connection, max_connections=pool.max_connections, **settings
    )
    return redis.asyncio.Redis.from_pool(twin_pool)  # closing the client closes the pool


def _retries_of(retry: Any) -> int:
    """How many times ``retry`` (a redis-py ``Retry`` or None) tries again: redis-py 6
    says so with ``get_retries()``; redis-py 5 (beside Celery 5.5) only keeps it as
    ``_retries``."""
    if retry is None:
        return 0
    get_retries = getattr(retry, "get_retries", None)
    return int(get_retries() if callable(get_retries) else getattr(retry, "_retries", 0))
