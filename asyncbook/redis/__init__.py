"""The book in Redis: ``RedisBook``, its key schema, connections and the change follower.

Every mutation is one atomic Lua call (``asyncbook/redis/lua``); every key of a book
shares one hash tag, so the same scripts run on Redis Cluster.
"""

from ._book import RedisBook
from ._changes import Change, follow_changes, follow_task, parse_change
from ._connection import DEFAULT_REDIS_URL, RedisUnavailableError, connect, retry_policy
from ._keys import KeySchema, escape_id
from ._scripts import BookScript, EventOutcome, ScriptedEvents

__all__ = [
    # the book
    "RedisBook",
    "KeySchema",
    "escape_id",
    # the caller's own scripts (apply_many_then, apply_in_script)
    "BookScript",
    "EventOutcome",
    "ScriptedEvents",
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
