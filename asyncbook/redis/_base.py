"""``BookBase``: what both Redis books are built from, an engine (a client, the book's
layout and the scripts registered on that client) and the book's settings
(``RedisBook`` on redis-py's ``Engine``, ``AsyncRedisBook`` on ``AsyncEngine``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Generic, Self, TypeVar

from ._connection import DEFAULT_REDIS_URL
from ._engine import EngineBase
from ._operations import BookLayout

__all__ = ["DEFAULT_RETENTION", "BookBase"]

DEFAULT_RETENTION = timedelta(hours=24)

_E = TypeVar("_E", bound=EngineBase)


class BookBase(Generic[_E]):
    """A book's engine, namespace, key schema and retention."""

    engine: _E
    """The book's engine: client, layout, scripts, and the calls built from them."""

    def __init__(
        self,
        client: Any,
        *,
        namespace: str = "asyncbook",
        retention_versions: int = 8,
        retention: timedelta | None = DEFAULT_RETENTION,
    ) -> None:
        self.engine = self._engine_for(client, BookLayout(namespace, retention_versions, retention))
        self.client = client
        self.layout = self.engine.layout
        self.keys = self.layout.keys
        self.namespace = namespace
        self.retention_versions = self.layout.retention_versions
        self.retention = retention

    @classmethod
    def _engine_for(cls, client: Any, layout: BookLayout) -> _E:
        """The engine of this book's flavour on ``client``."""
        raise NotImplementedError

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

        ``connection`` overrides the client's options: redis-py's connection settings
        (``socket_timeout``, ``retry``...). Any other keyword raises ``TypeError`` naming
        it (redis-py would fail at the first connection, or drop it unseen on a Cluster).
        """
        return cls(
            cls._client_for(url, **connection),
            namespace=namespace,
            retention_versions=retention_versions,
            retention=retention,
        )
