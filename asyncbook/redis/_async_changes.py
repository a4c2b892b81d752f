"""Following the book's change channel on ``redis.asyncio``: ``changes``, an async iterator.

The asyncio counterpart of ``follow_changes`` (``_changes``): it yields each published
``Change`` as it arrives (no polling) and ``None`` after every (re)subscribe, since
pub/sub forgets what was published while nobody listened: whoever follows looks its
tasks up again then. A dropped link is reopened with exponential backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Callable
from typing import Any

import redis.asyncio
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import SSLConnection

from ._changes import DROPPED, Change, parse_change
from ._twin import CONNECTION_SETTINGS

__all__ = ["changes"]

log = logging.getLogger(__name__)

_FIRST_DELAY = 0.05
"""Seconds before the first reconnect after the feed was lost (doubled up to the cap)."""


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
    delay = _FIRST_DELAY
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
                    kind = message.get("type")
                    if kind == "subscribe":
                        delay = _FIRST_DELAY
                        yield None
                    elif kind == "message":
                        change = parse_change(message["data"])
                        if change is None:
                            log.warning("ignoring a malformed change on %s", channel)
                        else:
                            yield change
        except DROPPED as error:
            # Once per outage: the attempts after the first are logged at DEBUG.
            level = logging.WARNING if delay == _FIRST_DELAY else logging.DEBUG
            log.log(level, "change feed lost (%s); reconnecting in %.2fs", error, delay)
            if on_reconnect is not None:
                on_reconnect(error)
            await asyncio.sleep(delay)
            delay = min(delay * 2, max_backoff)
        finally:
            if pubsub is not None:
                with contextlib.suppress(*DROPPED):
                    await pubsub.aclose()
            if node_client is not None:
                with contextlib.suppress(*DROPPED):
                    await node_client.aclose()


_ADDRESS = frozenset({"host", "port", "path", "db"})
"""What a node's client takes from the node itself, not from its connection settings."""


def _node_client(cluster: Any) -> Any:
    """A plain asyncio client on one node of ``cluster``, for its pub/sub: redis-py 5's
    asyncio ``RedisCluster`` has none, and a cluster delivers a PUBLISH to every node."""
    node = cluster.get_default_node()
    given = node.connection_kwargs
    settings = {
        name: given[name] for name in CONNECTION_SETTINGS if name in given and name not in _ADDRESS
    }
    ssl = isinstance(node.connection_class, type) and issubclass(
        node.connection_class, SSLConnection
    )
    return redis.asyncio.Redis(host=node.host, port=node.port, ssl=ssl, **settings)
