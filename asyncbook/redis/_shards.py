"""Which shard holds what, in a namespace split into S shards.

A task lives in shard ``crc32(task id) mod S``. A callback id or an idempotency key lives
in the shard of its *home*: the text a ``HomeRule`` reads from it. When the home's shard is
the task's, one script call claims and applies, as with one shard; else the id is claimed
in its home's shard first (``_claims``). Callback ids follow the book's rule (``home_of``:
``prefix_home`` unless the book is given another, as the Celery integration gives its
books its own); idempotency keys, given by clients, always follow ``prefix_home``.

The shard count is fixed at the namespace's first use, stored on its own tag
(``KeySchema.shard_count``; none stored: one shard); ``CountCheck`` refuses a book of
another count, its reads included.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeAlias

from ..errors import AsyncBookError
from ._keys import KeySchema
from ._plan import Pipeline, Plan, command

__all__ = [
    "MAX_SHARDS",
    "CountCheck",
    "HomeRule",
    "ShardMap",
    "prefix_home",
    "stored_shards",
]

MAX_SHARDS = 1024
"""At most this many shards: a merged read reads one page per shard."""

HomeRule: TypeAlias = Callable[[str], str]
"""Which text's shard holds a callback id: ``rule(callback id)`` is hashed as a task id
is. It must be a pure function of the id, the same in every writer of a namespace, or
one id is claimed in two shards."""


def prefix_home(identifier: str) -> str:
    """The generic ``HomeRule``: the task id ``identifier`` starts with (``<id>:...``),
    else ``identifier`` itself."""
    head, colon, _tail = identifier.partition(":")
    return head if colon and head else identifier


@dataclass(frozen=True)
class ShardMap:
    """The shards of one namespace: their key schemas, and which holds a task or an id."""

    namespace: str
    total: int
    home_of: HomeRule = prefix_home
    """The rule that homes callback ids (idempotency keys always follow ``prefix_home``)."""

    def index_of(self, task_id: str) -> int:
        """The shard of a task id (a stable hash of its UTF-8 text)."""
        if self.total == 1:
            return 0
        return zlib.crc32(task_id.encode("utf-8", "surrogatepass")) % self.total

    def home_index(self, callback_id: str) -> int:
        """The shard of a callback id (this map's ``home_of``)."""
        return self.index_of(self.home_of(callback_id))

    def key_index(self, key: str) -> int:
        """The shard of an idempotency key (``prefix_home``: keys are the client's)."""
        return self.index_of(prefix_home(key))


_FIX_COUNT = """
local stored = redis.call('GET', KEYS[1])
if stored then return tonumber(stored) end
if ARGV[1] ~= '1' and redis.call('EXISTS', KEYS[2]) == 1 then return -1 end
redis.call('SET', KEYS[1], ARGV[1])
return tonumber(ARGV[1])
"""
"""KEYS: the shard count, the one-shard creation counter; ARGV: the count asked for.
Returns the stored count (storing the asked one when none is), or -1 when a namespace of
one shard already holds tasks and more were asked for."""


def stored_shards(client: Any, namespace: str) -> int:
    """The namespace's stored shard count (1 when none is stored): one GET, on the node
    owning the namespace's own slot on a Cluster."""
    from redis.cluster import RedisCluster

    keys = KeySchema(namespace)
    if isinstance(client, RedisCluster):
        cluster: Any = client
        client = cluster.get_node_from_key(keys.tag).redis_connection
    value = client.get(keys.shard_count)
    return 1 if value is None else int(value)


class CountCheck:
    """A book's shard count against the namespace's, before each of the book's calls (on
    the namespace's own tag): one that differs from the stored one is refused, reads
    included (``conflict`` on ``shards``, naming the stored count).

    One round trip until the namespace's count is settled (stored, or a one-shard
    namespace that holds tasks); a namespace not used yet is read again at the next
    call, so a book opened before its first write still sees the count that write stores."""

    def __init__(self, namespace: str, shards: int) -> None:
        self.namespace = namespace
        self.shards = shards
        self.settled = False
        """True once the namespace's count is known to be this book's."""
        self._keys = KeySchema(namespace)

    def check(self) -> Plan[None]:
        """Read the namespace's count (the drivers ask until it is settled); a
        ``conflict`` naming ``shards`` when it is not this book's."""
        keys = self._keys
        read = [command("get", keys.shard_count), command("exists", keys.sequence)]
        stored, one_shard_tasks = yield Pipeline(read)
        if stored is not None:
            self._settle(int(stored))
        elif one_shard_tasks:
            self._settle(1 if self.shards == 1 else -1)
        # else not used yet: read again at the next call

    def fix(self) -> Plan[None]:
        """Store the book's count at the namespace's first use, or check it against the
        stored one (before a sharded book's first write), once."""
        if not self.settled:
            keys, count = self._keys, str(self.shards)
            found = yield command("eval", _FIX_COUNT, 2, keys.shard_count, keys.sequence, count)
            self._settle(int(found))

    def _settle(self, found: int) -> None:
        """Settled on the namespace's count ``found`` (-1: a namespace of one shard that
        holds tasks), or ``conflict`` when it is not this book's."""
        if found != self.shards:
            stored = (
                f"holds tasks in one shard; it cannot be opened with shards={self.shards}"
                if found == -1
                else f"has {found} shards; open it with shards={found}"
            )
            message = f"asyncbook: namespace {self.namespace!r} {stored}"
            raise AsyncBookError("conflict", message, field="shards")
        self.settled = True
