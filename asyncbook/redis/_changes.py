"""Following the book's change channel: ``follow_changes`` (the status server's and the
CLI's loop) and ``changes`` (its asyncio counterpart, an async iterator: no polling).

Every script that changes a task publishes ``{taskId, version, state, progress}`` on the
book's channel. Pub/sub forgets what was published while nobody listened, so a follower
hears of every (re)subscribe (``on_reset``; ``None`` from ``changes``): whoever follows
must look its tasks up again then. Both decide alike (``Backoff``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import redis.asyncio
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.connection import SSLConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .._book import AsyncBook
from .._models import AsyncTask
from .._watch import Message, messages_for, resume_light
from ._shard import Shard
from ._twin import node_settings

__all__ = ["Change", "changes", "follow_changes", "follow_task", "parse_change"]

log = logging.getLogger(__name__)

_FIRST_DELAY = 0.05
"""Seconds before the first reconnect after the feed was lost (doubled up to the cap)."""

_DROPPED = (RedisConnectionError, RedisTimeoutError, ConnectionError, OSError)
"""What a lost link to Redis raises: the follower reconnects after any of these."""


@dataclass(frozen=True)
class Change:
    """One published change: the task's version, state and progress after it."""

    task_id: str
    version: int
    state: str
    progress: int | float
    group_id: str | None = None
    """The task's group, when it is a member of one (extension)."""

    def to_wire(self) -> dict[str, Any]:
        """The channel's JSON shape (camelCase)."""
        wire: dict[str, Any] = {
            "taskId": self.task_id,
            "version": self.version,
            "state": self.state,
            "progress": self.progress,
        }
        if self.group_id is not None:
            wire["groupId"] = self.group_id
        return wire


def parse_change(payload: bytes | str) -> Change | None:
    """Read a channel message; None when it is not a well-formed change."""
    try:
        data = json.loads(payload)
    except (TypeError, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    task_id, version = data.get("taskId"), data.get("version")
    state, progress = data.get("state"), data.get("progress", 0)
    if not isinstance(task_id, str) or not isinstance(state, str):
        return None
    if isinstance(version, bool) or not isinstance(version, int):
        return None
    if isinstance(progress, bool) or not isinstance(progress, int | float):
        return None
    group = data.get("groupId")
    return Change(task_id, version, state, progress, group if isinstance(group, str) else None)


def follow_changes(
    client: Any,
    channel: str | Sequence[str],
    on_change: Callable[[Change], None],
    on_reset: Callable[[], None],
    *,
    stop: Callable[[], bool] = lambda: False,
    poll: float = 0.2,
    max_backoff: float = 2.0,
    on_reconnect: Callable[[Exception], None] | None = None,
) -> None:
    """Call ``on_change`` per change on ``channel`` (or on each of several: a sharded
    book's) until ``stop()`` is true.

    ``on_reset`` runs after every (re)subscribe, including redis-py's silent
    resubscribe after a reconnect. A dropped link (also one the callbacks meet) is
    reopened with exponential backoff; ``on_reconnect`` hears of it. Malformed
    messages are logged and skipped; any other error of a callback propagates.
    """
    backoff = Backoff(max_backoff)
    channels = [channel] if isinstance(channel, str) else list(channel)
    while not stop():
        pubsub = client.pubsub()
        try:
            pubsub.subscribe(*channels)
            while not stop():
                heard = backoff.heard(pubsub.get_message(timeout=poll), channels)
                if heard is True:
                    on_reset()
                elif heard:
                    on_change(heard)
        except _DROPPED as error:
            time.sleep(backoff.lost(error, on_reconnect))
        finally:
            with contextlib.suppress(*_DROPPED):
                pubsub.close()


class Backoff:
    """A follower's messages read, and its delay before it reconnects: doubled per
    failed try up to ``cap``, from ``_FIRST_DELAY`` again once subscribed."""

    def __init__(self, cap: float) -> None:
        self.cap, self.delay = cap, _FIRST_DELAY

    def heard(self, message: Any, channels: list[str]) -> Change | Literal[True] | None:
        """A message's change; True for the (re)subscribe's last confirmation (one per
        channel, with their count); else None (a malformed change is logged)."""
        kind = None if message is None else message.get("type")
        if kind == "subscribe" and message.get("data") == len(channels):
            self.delay = _FIRST_DELAY
            return True
        if kind != "message":
            return None
        change = parse_change(message["data"])
        if change is None:
            log.warning("ignoring a malformed change on %s", ", ".join(channels))
        return change

    def lost(self, error: Exception, on_reconnect: Callable[[Exception], None] | None) -> float:
        """Log a lost feed (at WARNING once per outage), tell ``on_reconnect``; the
        seconds to wait before reconnecting."""
        level = logging.WARNING if self.delay == _FIRST_DELAY else logging.DEBUG
        log.log(level, "change feed lost (%s); reconnecting in %.2fs", error, self.delay)
        if on_reconnect is not None:
            on_reconnect(error)
        delay, self.delay = self.delay, min(self.delay * 2, self.cap)
        return delay


class FollowedBook(AsyncBook, Protocol):
    """A book whose task changes are followed: a ``RedisBook``."""

    client: Any

    def shard_of(self, task_id: Any) -> Shard: ...


def follow_task(
    book: FollowedBook,
    task_id: str,
    on_batch: Callable[[list[Message]], None],
    *,
    cursor: int = 0,
    poll: float = 1.0,
    max_backoff: float = 2.0,
    on_reconnect: Callable[[Exception], None] | None = None,
    stop: Callable[[], bool] = lambda: False,
) -> AsyncTask | None:
    """Call ``on_batch`` with each batch of messages until the task is terminal.

    Follows the book's change channel and resumes from the last version it passed on;
    after a reconnect it resumes again, so no version is skipped or repeated. Returns
    the terminal task, or None when ``stop()`` said so. ``UnknownTaskError`` propagates.
    """
    fresh, ended = True, None  # ended: the terminal task, once seen

    def look_up() -> None:
        nonlocal cursor, fresh, ended
        result = resume_light(book, task_id, cursor)
        batch = messages_for(result, cursor, fresh)
        fresh, cursor = False, max(cursor, result.task.version)
        if batch:
            on_batch(batch)
        if result.task.terminal:
            ended = result.task

    def on_change(change: Change) -> None:
        if change.task_id == task_id and change.version > cursor:
            look_up()  # a newer version was announced

    follow_changes(
        book.client,
        book.shard_of(task_id).keys.changes_channel,
        on_change,
        look_up,
        stop=lambda: ended is not None or stop(),
        poll=poll,
        max_backoff=max_backoff,
        on_reconnect=on_reconnect,
    )
    return ended


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
        pubsub = node_client = None
        try:
            if isinstance(client, AsyncRedisCluster):
                await client.initialize()  # a cluster's pub/sub needs its slots known
            if not hasattr(client, "pubsub"):
                node_client = _node_client(client)
            pubsub = (client if node_client is None else node_client).pubsub()
            await pubsub.subscribe(channel)
            async with contextlib.aclosing(pubsub.listen()) as messages:
                async for message in messages:
                    heard = backoff.heard(message, [channel])
                    if heard is not None:
                        yield None if heard is True else heard
        except _DROPPED as error:
            await asyncio.sleep(backoff.lost(error, on_reconnect))
        finally:
            for opened in (pubsub, node_client):
                if opened is not None:
                    with contextlib.suppress(*_DROPPED):
                        await opened.aclose()


def _node_client(cluster: Any) -> Any:
    """A plain asyncio client on one node of ``cluster``, for its pub/sub: redis-py 5's
    asyncio ``RedisCluster`` has none, and a cluster delivers a PUBLISH to every node."""
    node = cluster.get_default_node()
    settings = node_settings(node.connection_kwargs)
    ssl = isinstance(node.connection_class, type) and issubclass(
        node.connection_class, SSLConnection
    )
    return redis.asyncio.Redis(host=node.host, port=node.port, ssl=ssl, **settings)
