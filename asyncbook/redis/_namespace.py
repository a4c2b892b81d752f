"""``Namespace``: one namespace of a Redis book, S >= 1 shards, as this process knows it."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any, TypedDict

from ..errors import invalid
from ._replicas import ReplicaWait
from ._shard import Shard
from ._shards import MAX_SHARDS, CountCheck, HomeRule, ShardMap, prefix_home

__all__ = ["DEFAULT_RETENTION", "BookOptions", "Namespace"]

DEFAULT_RETENTION = timedelta(hours=24)


class BookOptions(TypedDict, total=False):
    """A Redis book's settings, its keywords (``from_url`` says what each does)."""

    namespace: str
    retention_versions: int
    retention: timedelta | None
    wait_replicas: int
    wait_timeout_ms: int
    shards: int
    home_of: HomeRule


class Namespace:
    """The shards of a namespace (each a ``Shard``), which shard holds a task or an id
    (``ShardMap``), its settings and its shard-count check; no I/O. Every operation of
    the books is a namespace plan over it (``_merged``). S = 1 is a namespace of one
    shard on the tag ``{namespace}``: the layout of a book that was never sharded."""

    def __init__(
        self,
        namespace: str = "asyncbook",
        *,
        shards: int = 1,
        retention_versions: int = 8,
        retention: timedelta | None = DEFAULT_RETENTION,
        wait_replicas: int = 0,
        wait_timeout_ms: int = 1000,
        home_of: HomeRule = prefix_home,
    ) -> None:
        self.wait = ReplicaWait(wait_replicas, wait_timeout_ms)
        if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= MAX_SHARDS:
            raise invalid(f"shards must be an integer from 1 to {MAX_SHARDS}", field="shards")
        self.name = namespace
        self.count = shards
        """How many shards the namespace has (fixed at its first use)."""
        self.retention = retention
        self.shards = [
            Shard(namespace, retention_versions, retention, (index, shards), home_of)
            for index in range(shards)
        ]
        """One ``Shard`` per shard, in shard order."""
        self.first = self.shards[0]
        """Shard 0 (the only one when S = 1)."""
        self.home = self.first if shards == 1 else Shard(namespace, retention_versions, retention)
        """The shard on the namespace's own tag, which holds its shard count."""
        self.map = ShardMap(namespace, shards, home_of)
        """Which shard holds a task, a callback id (``home_of``) or an idempotency key."""
        self.count_check = CountCheck(namespace, shards)
        """The namespace's stored shard count, checked before each call."""

    def index_of(self, task_id: Any) -> int:
        """The shard holding ``task_id`` (0 for a value that is no id: the plan refuses it
        there, naming the field)."""
        return self.map.index_of(task_id) if isinstance(task_id, str) else 0

    def shard_of(self, task_id: Any) -> Shard:
        """The ``Shard`` holding ``task_id``."""
        return self.shards[self.index_of(task_id)]

    def crosses(self, task_id: Any, identifier: Any, *, key: bool = False) -> bool:
        """Whether callback id ``identifier`` (``key``: idempotency key) lives in another
        shard than ``task_id``. Every text is an id, the empty one included: global, as
        the reference's ``callbackId !== undefined``."""
        if self.count == 1 or not (isinstance(task_id, str) and isinstance(identifier, str)):
            return False
        home = self.map.key_index(identifier) if key else self.map.home_index(identifier)
        return home != self.map.index_of(task_id)

    def by_shard(self, task_ids: list[Any]) -> dict[int, list[int]]:
        """The positions of ``task_ids`` grouped by the shard holding each, in order."""
        found: dict[int, list[int]] = {}
        for at, task_id in enumerate(task_ids):
            found.setdefault(self.index_of(task_id), []).append(at)
        return found

    def share(self, limit: int) -> int:
        """A shard's share of ``limit`` (rounded up)."""
        return math.ceil(limit / self.count)
