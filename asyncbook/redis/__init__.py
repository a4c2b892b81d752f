"""The book in Redis: ``RedisBook``, its key schema, connections and the change follower.

Every mutation is one atomic Lua call (``asyncbook/redis/lua``); every key of a book
shares one hash tag, so the same scripts run on Redis Cluster.
"""

from ._book import RedisBook
from ._changes import Change, follow_changes, follow_task, parse_change
from ._connection import DEFAULT_REDIS_URL, RedisUnavailableError, connect, retry_policy
from ._keys import KeySchema, escape_id

__all__ = [
    # the book
    "RedisBook",
    "KeySchema",
    "escape_id",
    # connections
    "DEFAULT_REDIS_URL",
    "RedisUnavailableError",
    "connect",
    "retry_policy",
    # following changes
    "Change",
    "follow_changes",
    "follow_task",
    "parse_change",
]
