"""The book in Redis: ``RedisBook`` (and ``AsyncRedisBook`` for asyncio), its key schema,
connections and the change followers.

Every mutation is one atomic Lua call (``asyncbook/redis/lua``); every key of a shard
shares one hash tag, so the same scripts run on Redis Cluster. A namespace has S >= 1
shards (``shards=S``), one such tag each.
"""

from ._async_book import AsyncRedisBook
from ._book import RedisBook
from ._changes import Change, changes, follow_changes, follow_task, parse_change
from ._connection import (
    DEFAULT_REDIS_URL,
    RedisUnavailableError,
    connect,
    connect_async,
    retry_policy,
)
from ._keys import KeySchema, escape_id
from ._resends import (
    BROKER_SETTING,
    RESENDABLE_STATES,
    RETRYABLE_STATES,
    ResendClaim,
    ResendResult,
    RetryClaim,
    RetryResult,
    claim_book_resends,
    claim_resends,
    claim_retries,
)
from ._scripts import BookScript, EventOutcome, ScriptedEvents
from ._shards import MAX_SHARDS, HomeRule, prefix_home, stored_shards

__all__ = [
    # the books
    "RedisBook",
    "ShardedRedisBook",
    "AsyncRedisBook",
    "AsyncShardedRedisBook",
    "KeySchema",
    "escape_id",
    "MAX_SHARDS",
    "stored_shards",
    "HomeRule",
    "prefix_home",
    # the caller's own scripts (apply_many_then, apply_in_script)
    "BookScript",
    "EventOutcome",
    "ScriptedEvents",
    # resends (the kept message as a new task, asyncbook.celery.Resender publishes it)
    "BROKER_SETTING",
    "RESENDABLE_STATES",
    "ResendClaim",
    "ResendResult",
    "claim_resends",
    "claim_book_resends",
    # their old names, until 0.3.0 (docs/resend.md)
    "RETRYABLE_STATES",
    "RetryClaim",
    "RetryResult",
    "claim_retries",
    # connections
    "DEFAULT_REDIS_URL",
    "RedisUnavailableError",
    "connect",
    "connect_async",
    "retry_policy",
    # following changes
    "Change",
    "follow_changes",
    "follow_task",
    "parse_change",
    "changes",
]

ShardedRedisBook = RedisBook
"""Deprecated alias, kept for one release: a book of S shards is ``RedisBook(...,
shards=S)``, one class for every shard count."""
AsyncShardedRedisBook = AsyncRedisBook
"""Deprecated alias, kept for one release: ``AsyncRedisBook(..., shards=S)``."""
