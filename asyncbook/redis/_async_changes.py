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

from redis.asyncio.cluster import RedisCluster

from ._changes import DROPPED, Change, parse_change

__all__ = ["changes"]

log = logging.getLogger(__name__)


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
    delay = 0.05
    while True:
        pubsub = None
        try:
            if isinstance(client, RedisCluster):
                await client.initialize()  # a cluster's pub/sub needs its slots known
            pubsub = client.pubsub()
            await pubsub.subscribe(channel)
            async with contextlib.aclosing(pubsub.listen()) as messages:
                async for message in messages:
                    kind = message.get("type")
                    if kind == "subscribe":
                        delay = 0.05
                        yield None
                    elif kind == "message":
                        change = parse_change(message["data"])
                        if change is None:
                            log.warning("ignoring a malformed change on %s", channel)
                        else:
                            yield change
        except DROPPED as error:
            log.warning("change feed lost (%s); reconnecting in %.2fs", error, delay)
            if on_reconnect is not None:
                on_reconnect(error)
            await asyncio.sleep(delay)
            delay = min(delay * 2, max_backoff)
        finally:
            if pubsub is not None:
                with contextlib.suppress(*DROPPED):
                    await pubsub.aclose()
