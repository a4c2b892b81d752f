"""Following the book's change channel on ``redis.asyncio``: ``changes``, an async iterator.

The asyncio counterpart of ``follow_changes`` (``_changes``): it yields each published
``Change`` as it arrives (no polling) and ``None`` after every (re)subscribe, since
pub/sub forgets what was published while nobody listened: whoever follows looks its
tasks up again then. A dropped link is reopened with exponential backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Callable
from typing import Any

import redis.asyncio
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import SSLConnection

from ._changes import DROPPED, Backoff, Change
from ._twin import node_settings

__all__ = ["changes"]


async def changes(
    client: Any,
    channel: str,
    *,
    max_backoff: float = 2.0,
    on_reconnect: Callable[[Exception], None] | None = None,
) -> AsyncGenerator[Change | None, None]:
    """Changes on ``channel`` as they are published; None after every (re)subscribe.

    Runs until the caller stops iterating (close it: ``contextlib.aclosing``).
    Malformed messages are logged and skipped; ``on_reconnect`` hears of a dropped link.
    """
    backoff = Backoff(max_backoff)
    while True:
        pubsub = None
        node_client = None
        try:
            if isinstance(client, RedisCluster):
                await client.initialize()  # a cluster's pub/sub needs its slots known
            if hasattr(client, "pubsub"):
                pubsub = client.pubsub()
            else:
                node_client = _node_client(client)
                pubsub = node_client.pubsub()
            await pubsub.subscribe(channel)
            async with contextlib.aclosing(pubsub.listen()) as messages:
                async for message in messages:
                    heard = backoff.heard(message, channel, 1)
                    if heard is not None:
                        yield None if heard is True else heard
        except DROPPED as error:
            await asyncio.sleep(backoff.lost(error, on_reconnect))
        finally:
            if pubsub is not None:
                with contextlib.suppress(*DROPPED):
                    await pubsub.aclose()
            if node_client is not None:
                with contextlib.suppress(*DROPPED):
                    await node_client.aclose()


def _node_client(cluster: Any) -> Any:
    """A plain asyncio client on one node of ``cluster``, for its pub/sub: redis-py 5's
    asyncio ``RedisCluster`` has none, and a cluster delivers a PUBLISH to every node."""
    node = cluster.get_default_node()
    settings = node_settings(node.connection_kwargs)
    ssl = isinstance(node.connection_class, type) and issubclass(
        node.connection_class, SSLConnection
    )
    return redis.asyncio.Redis(host=node.host, port=node.port, ssl=ssl, **settings)
