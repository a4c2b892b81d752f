"""``BookBase``: what both Redis books are built from, an engine (a client, the book's
layout and the scripts registered on that client) and the book's settings
(``RedisBook`` on redis-py's ``Engine``, ``AsyncRedisBook`` on ``AsyncEngine``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, ClassVar, Self

from ..errors import invalid
from ._connection import DEFAULT_REDIS_URL, book_client
from ._engine import EngineBase
from ._replicas import ReplicaWait
from ._shard import Shard
from ._shards import CountCheck, HomeRule, prefix_home, require_shards

__all__ = ["DEFAULT_RETENTION", "BookBase"]

DEFAULT_RETENTION = timedelta(hours=24)


class BookBase:
    """A book's engine, namespace, key schema and retention."""

    engine_type: ClassVar[type[EngineBase]]
    """The class of the book's engine (and so the flavour of its client)."""
    engine: EngineBase
    """The book's engine: client, layout, scripts, and the calls built from them."""
    sharded: ClassVar[bool] = False
    """True for a book of a namespace of several shards (``ShardedRedisBook``)."""

    def __init__(
        self,
        client: Any,
        *,
        namespace: str = "asyncbook",
        retention_versions: int = 8,
        retention: timedelta | None = DEFAULT_RETENTION,
        wait_replicas: int = 0,
        wait_timeout_ms: int = 1000,
        shards: int = 1,
        shard: tuple[int, int] = (0, 1),
        home_of: HomeRule = prefix_home,
    ) -> None:
        if require_shards(shards) != 1 and not self.sharded:
            raise invalid(f"{type(self).__name__} has one shard; shards must be 1", field="shards")
        layout = Shard(namespace, retention_versions, retention, shard)
        self.engine = self.engine_type(client, layout, ReplicaWait(wait_replicas, wait_timeout_ms))
        self.client = client
        self.layout = self.engine.layout
        self.keys = self.layout.keys
        self.namespace = namespace
        self.retention_versions = self.layout.retention_versions
        self.retention = retention
        self.wait_replicas = wait_replicas
        self.wait_timeout_ms = wait_timeout_ms
        self.shard = shard
        """Which shard of how many this book is: (0, 1) for a namespace of one shard."""
        self.home_of = home_of
        """The rule homing callback ids in a sharded namespace (``_shards.HomeRule``)."""
        self.shard_check = CountCheck(namespace, shard[1])
        """The namespace's stored shard count checked before each call (a sharded book's
        own count, shared by its shards)."""

    @classmethod
    def from_url(
        cls,
        url: str = DEFAULT_REDIS_URL,
        *,
        namespace: str = "asyncbook",
        retention_versions: int = 8,
        retention: timedelta | None = DEFAULT_RETENTION,
        wait_replicas: int = 0,
        wait_timeout_ms: int = 1000,
        shards: int = 1,
        home_of: HomeRule = prefix_home,
        **connection: Any,
    ) -> Self:
        """A book on the Redis at ``url`` (redis://, rediss://, unix://, redis+cluster://,
        redis+sentinel://); no connection is made until the first call.

        ``wait_replicas`` > 0: each write waits (``WAIT``, in the write's round trip) for
        that many replicas, up to ``wait_timeout_ms``, else raises ``NotReplicatedError``
        (docs/redis.md, "Waiting for a replica", says which writes).

        ``shards`` > 1 splits the namespace over that many hash tags, so it spreads over
        a Cluster's masters (a ``RedisBook`` then is a ``ShardedRedisBook``); the count
        is fixed at the namespace's first use (docs/redis.md, "Sharded namespaces");
        ``home_of`` says which shard claims a callback id (the same in every writer).

        ``connection`` overrides the client's options: redis-py's connection settings
        (``socket_timeout``, ``retry``...). Any other keyword raises ``TypeError`` naming
        it (redis-py would fail at the first connection, or drop it unseen on a Cluster).
        """
        where = f"{cls.__name__}.from_url()"
        return cls(
            book_client(url, connection, asyncio=cls.engine_type.asyncio, where=where),
            namespace=namespace,
            retention_versions=retention_versions,
            retention=retention,
            wait_replicas=wait_replicas,
            wait_timeout_ms=wait_timeout_ms,
            shards=shards,
            home_of=home_of,
        )
