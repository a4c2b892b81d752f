"""``BookBase``: what both Redis books are built from, a client, the book's layout and
the scripts registered on that client (``RedisBook`` on redis-py, ``AsyncRedisBook`` on
``redis.asyncio``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Self

from ._connection import DEFAULT_REDIS_URL
from ._operations import BookLayout
from ._scripts import BookScripts

__all__ = ["DEFAULT_RETENTION", "BookBase"]

DEFAULT_RETENTION = timedelta(hours=24)


class BookBase:
    """A book's client, namespace, key schema, retention and registered scripts."""

    def __init__(
        self,
        client: Any,
        *,
        namespace: str = "asyncbook",
        retention_versions: int = 8,
        retention: timedelta | None = DEFAULT_RETENTION,
    ) -> None:
        self.client = client
        self.layout = BookLayout(namespace, retention_versions, retention)
        self.keys = self.layout.keys
        self.namespace = namespace
        self.retention_versions = self.layout.retention_versions
        self.retention = retention
        self._scripts = BookScripts.register(client)

    @classmethod
    def _client_for(cls, url: str, **options: Any) -> Any:
        """A client of this book's flavour for ``url``."""
        raise NotImplementedError

    @classmethod
    def from_url(
        cls,
        url: str = DEFAULT_REDIS_URL,
        *,
        namespace: str = "asyncbook",
        retention_versions: int = 8,
        retention: timedelta | None = DEFAULT_RETENTION,
        **connection: Any,
    ) -> Self:
        """A book on the Redis at ``url`` (redis://, rediss://, unix://, redis+cluster://,
        redis+sentinel://); no connection is made until the first call.

        ``connection`` overrides the client's options (``socket_timeout``, ``retry``...).
        """
        return cls(
            cls._client_for(url, **connection),
            namespace=namespace,
            retention_versions=retention_versions,
            retention=retention,
        )
