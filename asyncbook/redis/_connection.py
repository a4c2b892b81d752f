"""Redis clients from URLs, with an explicit retry policy.

``redis://`` and ``rediss://`` (TLS) and ``unix://`` give a ``Redis`` client;
``redis+cluster://`` and ``rediss+cluster://`` a ``RedisCluster``;
``redis+sentinel://host:port[,host:port…]/service[/db]`` (or ``rediss+sentinel://``) the
current master of a Sentinel-monitored service. User and password in the URL authenticate
with Redis ACLs (for Sentinel: on the master).
"""

from __future__ import annotations

import contextlib
import difflib
import inspect
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Any
from urllib.parse import unquote

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.connection
import redis.asyncio.retry
import redis.asyncio.sentinel
import redis.cluster
import redis.connection
from redis.backoff import ExponentialBackoff
from redis.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry
from redis.sentinel import Sentinel

from ..errors import BookUnavailableError, invalid

__all__ = [
    "DEFAULT_REDIS_URL",
    "RedisUnavailableError",
    "async_retry_policy",
    "book_client",
    "connect",
    "connect_async",
    "retry_policy",
]

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
_SCHEMES = (
    "redis",
    "rediss",
    "unix",
    "redis+cluster",
    "rediss+cluster",
    "redis+sentinel",
    "rediss+sentinel",
)


_RETRIED = (RedisConnectionError, RedisTimeoutError, ConnectionResetError)


def retry_policy(retries: int = 5) -> Retry:
    """Exponential backoff (50 ms doubling, capped at 1 s) on connection errors and timeouts."""
    return Retry(ExponentialBackoff(cap=1.0, base=0.05), retries, supported_errors=_RETRIED)


def async_retry_policy(retries: int = 5) -> redis.asyncio.retry.Retry:
    """``retry_policy`` for ``redis.asyncio`` clients."""
    return redis.asyncio.retry.Retry(
        ExponentialBackoff(cap=1.0, base=0.05),
        retries,
        supported_errors=(RedisConnectionError, RedisTimeoutError),  # redis.asyncio wraps OSError
    )


BOOK_SETTINGS = (
    "namespace",
    "retention_versions",
    "retention",
    "wait_replicas",
    "wait_timeout_ms",
    "shards",
)
"""The keywords of a book's ``from_url`` that are the book's own, not the client's."""


def _keywords(*functions: Any) -> set[str]:
    """The names a caller may give these functions by keyword."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {
        parameter.name
        for function in functions
        for parameter in inspect.signature(function).parameters.values()
        if parameter.kind in kinds and parameter.name != "self"
    }


@dataclass(frozen=True)
class _Clients:
    """The client classes and retry policy of one flavour of redis-py (sync, or
    ``redis.asyncio``), and the keywords its clients built from a URL accept."""

    redis: Any
    cluster: Any
    sentinel: Any
    retry: Any
    connections: Any
    """The module of the flavour's connection and pool classes."""
    node_settings: frozenset[str] = frozenset()
    """What a Cluster client hands on to the client of each node."""

    @cached_property
    def plain_settings(self) -> frozenset[str]:
        """What ``Redis.from_url`` (and a Sentinel's ``master_for``) hands on to its
        connection pool and connections, and the one keyword it keeps."""
        c = self.connections
        classes = (c.ConnectionPool, c.Connection, c.SSLConnection, c.UnixDomainSocketConnection)
        inits = [vars(base).get("__init__") for cls in classes for base in cls.__mro__]
        kept = {"single_connection_client", "auto_close_connection_pool"}
        return frozenset(_keywords(*filter(None, inits)) | kept & _keywords(self.redis.__init__))

    @cached_property
    def cluster_settings(self) -> frozenset[str]:
        """What ``RedisCluster.from_url`` takes itself or hands on to each node's client
        (redis-py drops any other keyword without a word: ``REDIS_ALLOWED_KEYS``)."""
        return frozenset(_keywords(self.cluster.__init__) | self.node_settings)


_SYNC = _Clients(
    redis.Redis,
    RedisCluster,
    Sentinel,
    retry_policy,
    redis.connection,
    frozenset(getattr(redis.cluster, "REDIS_ALLOWED_KEYS", ())),
)
_ASYNC = _Clients(
    redis.asyncio.Redis,
    redis.asyncio.cluster.RedisCluster,
    redis.asyncio.sentinel.Sentinel,
    async_retry_policy,
    redis.asyncio.connection,
)


def connect(url: str = DEFAULT_REDIS_URL, **options: Any) -> Any:
    """A sync client for ``url`` with retries, timeouts and health checks set.

    ``options`` are redis-py's connection settings (``socket_timeout``, ``retry``,
    ``ssl_ca_certs``...); any other keyword raises ``TypeError`` naming it."""
    return _connect(_SYNC, url, options, "connect()")


def connect_async(url: str = DEFAULT_REDIS_URL, **options: Any) -> Any:
    """``connect`` for ``redis.asyncio``: an asyncio client for ``url``, set up alike."""
    return _connect(_ASYNC, url, options, "connect_async()")


def book_client(url: str, options: dict[str, Any], *, asyncio: bool, where: str) -> Any:
    """The client a book's ``from_url`` (``where``) builds: ``connect`` (``asyncio``:
    ``connect_async``), an unknown keyword named as the book's."""
    return _connect(_ASYNC if asyncio else _SYNC, url, options, where, BOOK_SETTINGS)


def _connect(
    clients: _Clients, url: str, options: dict[str, Any], where: str, own: Iterable[str] = ()
) -> Any:
    if not isinstance(url, str) or "://" not in url:
        raise invalid("redis url must look like redis://host:port/db", field="redis_url")
    scheme, rest = url.split("://", 1)
    if scheme not in _SCHEMES:
        raise invalid(f"redis url scheme must be one of {', '.join(_SCHEMES)}", field="redis_url")
    cluster = scheme.endswith("+cluster")
    accepted = clients.cluster_settings if cluster else clients.plain_settings
    for name in options:
        if name not in accepted:
            close = difflib.get_close_matches(name, [*own, *sorted(accepted)], n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            book = "the book nor of " if own else ""
            raise TypeError(
                f"{where} got an unexpected keyword argument {name!r}: not a setting of "
                f"{book}redis-py's client for {scheme}:// URLs{hint}"
            )
    settings: dict[str, Any] = {
        "retry": clients.retry(5),
        "socket_timeout": 10.0,
        "socket_connect_timeout": 5.0,
        "health_check_interval": 30,
        **options,
    }
    if scheme in ("redis", "rediss", "unix"):
        return clients.redis.from_url(url, **settings)
    settings.pop("health_check_interval")  # a plain client's only
    if cluster:
        return clients.cluster.from_url(f"{scheme.removesuffix('+cluster')}://{rest}", **settings)
    return _sentinel_master(clients.sentinel, scheme, rest, settings)


def _sentinel_master(monitor: Any, scheme: str, rest: str, settings: dict[str, Any]) -> Any:
    credentials, _, location = rest.rpartition("@")
    hosts, _, path = location.partition("/")
    parts = [unquote(part) for part in path.split("/") if part]
    if not hosts or not parts or len(parts) > 2 or (len(parts) == 2 and not parts[1].isdigit()):
        raise invalid(
            "sentinel url must look like redis+sentinel://host:port[,host:port]/service[/db]",
            field="redis_url",
        )
    sentinels = []
    for host in hosts.split(","):
        name, _, port = host.rpartition(":")
        if not name or not port.isdigit():
            raise invalid(f"sentinel address {host!r} must be host:port", field="redis_url")
        sentinels.append((name.strip("[]"), int(port)))
    username, _, password = credentials.partition(":")
    master_settings = {
        **settings,
        "username": unquote(username) or None,
        "password": unquote(password) or None,
        "db": int(parts[1]) if len(parts) == 2 else 0,
        "ssl": scheme.startswith("rediss"),
    }
    sentinel = monitor(
        sentinels,
        socket_timeout=settings["socket_timeout"],
        socket_connect_timeout=settings["socket_connect_timeout"],
    )
    return sentinel.master_for(parts[0], **master_settings)


class RedisUnavailableError(BookUnavailableError, RedisConnectionError):
    """Redis could not be reached, or did not answer in time, after redis-py's retries.

    Also a redis-py ``ConnectionError``, so code written against redis-py still catches it.
    """


def rediscover(book: object) -> None:
    """After an outage of a book on a Cluster: read which node serves which slot again
    (the book's pipelines go straight to its slot's node: redis-py's cluster client never
    hears it fail, and would go on knocking at a dead master)."""
    client = getattr(book, "client", None)
    if isinstance(client, RedisCluster):
        # No node answers yet: the next outage reads them again.
        with contextlib.suppress(RedisError, RedisClusterException, OSError):
            client.nodes_manager.initialize()
