"""``async_client_like``: an asyncio client to the server a redis-py client talks to,
with the same connection settings (``AsyncRedisBook.twin_of`` builds on it)."""

from __future__ import annotations

import inspect
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.sentinel
import redis.cluster
import redis.sentinel

from ._connection import async_retry_policy

__all__ = ["CONNECTION_SETTINGS", "async_client_like", "node_settings"]

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
_ADDRESS = frozenset({"host", "port", "path", "db"})
"""Where a connection goes: a Cluster's and a Sentinel's clients find it themselves."""
_FAKE_SETTINGS = (
    *("server", "host", "port", "version", "server_type", "lua_modules"),
    *("db", "decode_responses", "encoding", "encoding_errors", "protocol"),
)
"""What names a fakeredis client's ``FakeServer`` (``server``, else the address and
version it was made for), and how it answers."""


def async_client_like(client: Any) -> Any | None:
    """A ``redis.asyncio`` client like ``client`` (a plain, Cluster, Sentinel or fakeredis
    one: address, db, credentials, TLS, timeouts, as many retries); None for a client of
    another kind, or on a pool of its own making."""
    if type(client).__module__.partition(".")[0] == "fakeredis":
        return _fake_like(client)
    if type(client) is redis.cluster.RedisCluster:
        return _cluster_like(client)
    if type(client) is not redis.Redis:
        return None
    pool = client.connection_pool
    if type(pool) is redis.sentinel.SentinelConnectionPool:
        return _sentinel_master_like(pool)
    if type(pool) is not redis.ConnectionPool or pool.connection_class not in _CONNECTIONS:
        return None
    settings = _settings(pool.connection_kwargs)
    connection = _CONNECTIONS[pool.connection_class]
    twin_pool = redis.asyncio.ConnectionPool(
        connection_class=connection, max_connections=pool.max_connections, **settings
    )
    return redis.asyncio.Redis.from_pool(twin_pool)  # closing the client closes the pool


def node_settings(given: dict[str, Any], leave: frozenset[str] = _ADDRESS) -> dict[str, Any]:
    """The ``CONNECTION_SETTINGS`` of ``given`` but ``leave`` (by default the address: a
    Cluster node's client takes it from the node)."""
    return {
        name: given[name] for name in CONNECTION_SETTINGS if name in given and name not in leave
    }


def _settings(given: dict[str, Any], leave: frozenset[str] = frozenset()) -> dict[str, Any]:
    """``node_settings``, and as many retries."""
    retry = async_retry_policy(_retries_of(given.get("retry")))
    return {**node_settings(given, leave), "retry": retry}


def _cluster_like(client: redis.cluster.RedisCluster) -> Any:
    """A ``redis.asyncio`` Cluster on ``client``'s startup nodes, with its settings."""
    manager = client.nodes_manager
    nodes = [
        redis.asyncio.cluster.ClusterNode(node.host, node.port)
        for node in manager.startup_nodes.values()
    ]
    given = manager.connection_kwargs
    settings = _settings(given, _ADDRESS)
    settings["retry"] = async_retry_policy(_retries_of(getattr(client, "retry", None)))
    if issubclass(given.get("connection_class", redis.Connection), redis.SSLConnection):
        settings["ssl"] = True
    strategy = getattr(client, "load_balancing_strategy", None)  # redis-py >= 5.3
    if strategy is not None:
        settings["load_balancing_strategy"] = strategy
    elif client.read_from_replicas:  # its older spelling
        settings["read_from_replicas"] = True
    accepted = inspect.signature(redis.asyncio.cluster.RedisCluster).parameters
    settings = {name: value for name, value in settings.items() if name in accepted}
    return redis.asyncio.cluster.RedisCluster(startup_nodes=nodes, **settings)


def _sentinel_master_like(pool: Any) -> Any:
    """The master of ``pool``'s service, asked of its sentinels on ``redis.asyncio``."""
    manager = pool.sentinel_manager
    sentinels = [
        (kwargs["host"], kwargs["port"])
        for kwargs in (sentinel.connection_pool.connection_kwargs for sentinel in manager.sentinels)
    ]
    asked = {k: v for k, v in manager.sentinel_kwargs.items() if k in CONNECTION_SETTINGS}
    monitor = redis.asyncio.sentinel.Sentinel(
        sentinels, min_other_sentinels=manager.min_other_sentinels, sentinel_kwargs=asked
    )
    settings = _settings(pool.connection_kwargs, _ADDRESS - {"db"})
    ssl = issubclass(pool.connection_class, redis.SSLConnection)
    return monitor.master_for(
        pool.service_name, check_connection=pool.check_connection, ssl=ssl, **settings
    )


def _fake_like(client: Any) -> Any:
    """A ``fakeredis.FakeAsyncRedis`` on ``client``'s ``FakeServer`` (the same data)."""
    import fakeredis  # only here: fakeredis is a dev and embedded-demo dependency

    given = client.connection_pool.connection_kwargs
    settings = {name: given[name] for name in _FAKE_SETTINGS if name in given}
    return fakeredis.FakeAsyncRedis(**settings)


def _retries_of(retry: Any) -> int:
    """How many times ``retry`` (a redis-py ``Retry`` or None) tries again (redis-py 5,
    beside Celery 5.5, has no ``get_retries()``)."""
    get_retries = getattr(retry, "get_retries", None)
    return int(get_retries() if callable(get_retries) else getattr(retry, "_retries", 0))
