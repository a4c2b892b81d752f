"""Redis clients from URLs, with an explicit retry policy.

``redis://`` and ``rediss://`` (TLS) and ``unix://`` give a ``Redis`` client;
``redis+cluster://`` and ``rediss+cluster://`` a ``RedisCluster``; user and password
in the URL authenticate with Redis ACLs.
"""

from __future__ import annotations

from typing import Any

import redis
from redis.backoff import ExponentialBackoff
from redis.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from .errors import invalid

__all__ = ["DEFAULT_REDIS_URL", "connect", "retry_policy"]

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
_SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster")


def retry_policy(retries: int = 5) -> Retry:
    """Exponential backoff (50 ms doubling, capped at 1 s) on connection errors and timeouts."""
    return Retry(
        ExponentialBackoff(cap=1.0, base=0.05),
        retries,
        supported_errors=(RedisConnectionError, RedisTimeoutError, ConnectionResetError),
    )


def connect(url: str = DEFAULT_REDIS_URL, **options: Any) -> Any:
    """A sync client for ``url`` with retries, timeouts and health checks set."""
    if not isinstance(url, str) or "://" not in url:
        raise invalid("redis url must look like redis://host:port/db", field="redis_url")
    scheme, rest = url.split("://", 1)
    if scheme not in _SCHEMES:
        raise invalid(f"redis url scheme must be one of {', '.join(_SCHEMES)}", field="redis_url")
    settings: dict[str, Any] = {
        "retry": retry_policy(),
        "socket_timeout": 10.0,
        "socket_connect_timeout": 5.0,
        "health_check_interval": 30,
        **options,
    }
    if scheme.endswith("+cluster"):
        plain = scheme.removesuffix("+cluster")
        settings.pop("health_check_interval")
        return RedisCluster.from_url(f"{plain}://{rest}", **settings)
    return redis.Redis.from_url(url, **settings)
