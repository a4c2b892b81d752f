"""The Redis key schema, in one place.

Every key of a namespace carries the hash tag ``{namespace}``, so all of a book's keys
live in one Redis Cluster slot: every script touches one slot, and callback ids and
idempotency keys stay global and exact on a single Redis and on a Cluster alike.
A sharded namespace (``_shards``) has one such schema per shard, each on its own hash
tag ``{namespace{k.n}`` (a namespace holds no brace, so no shard's tag is any other
namespace's or shard's). Ids follow a fixed per-kind prefix and are escaped (``%``,
``{``, ``}``), so different ids never share a key and no id can move a key into another
slot.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from .._models import STATE_NAMES
from ..errors import invalid

__all__ = ["SORT_INDEXED", "KeySchema", "escape_id", "shard_tag"]

SORT_INDEXED = ("started", "ended", "runtime", "attempts")
"""The fields a sort index is kept for (lua/_info.lua's SORT_SLOT order)."""


_SPECIAL = frozenset("%{}")


def escape_id(value: str) -> str:
    """Injective, brace-free spelling of an id for use inside a key."""
    if _SPECIAL.isdisjoint(value):
        return value
    return value.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")


@lru_cache(maxsize=4096)
def shard_tag(namespace: str, index: int, total: int) -> str:
    """The hash tag of shard ``index`` of ``total``: ``{namespace{index.n}`` with the
    smallest n whose Cluster slot lies in the index-th of ``total`` equal slot ranges, so
    the shards spread evenly over the masters of a cluster whose slots are split evenly
    (as ``redis-cli --cluster create`` splits them). Stable: a function of its arguments."""
    low = index * REDIS_CLUSTER_HASH_SLOTS // total
    high = (index + 1) * REDIS_CLUSTER_HASH_SLOTS // total
    n = 0
    while True:
        tag = f"{{{namespace}{{{index}.{n}}}"
        if low <= key_slot(tag.encode()) < high:
            return tag
        n += 1


@dataclass(frozen=True)
class KeySchema:
    """Names of every key and channel a book uses under one namespace."""

    namespace: str
    shard_index: int = 0
    """Which shard of the namespace these keys are (0 when it has one)."""
    shard_total: int = 1
    """How many shards the namespace has; 1 is the one-slot layout, tag ``{namespace}``."""

    def __post_init__(self) -> None:
        ns = self.namespace
        if not isinstance(ns, str) or not ns or any(c in ns for c in "{}") or ns.isspace():
            raise invalid("namespace must be a non-empty string without braces", field="namespace")

    @property
    def tag(self) -> str:
        """The hash tag shared by every key of the namespace (of the shard)."""
        if self.shard_total == 1:
            return "{" + self.namespace + "}"
        return shard_tag(self.namespace, self.shard_index, self.shard_total)

    @property
    def shard_count(self) -> str:
        """String: how many shards the namespace has, fixed at its first use (absent: 1);
        always on the namespace's own tag."""
        return "{" + self.namespace + "}:shards"

    def session(self, digest: str) -> str:
        """String: a status server's signed-in session (the SHA-256 of its id), alive
        until sign-out or its expiry; always on the namespace's own tag."""
        return "{" + self.namespace + "}:session:" + digest

    def task(self, task_id: str) -> str:
        """Hash with a task's short fields."""
        return f"{self.tag}:t:{escape_id(task_id)}"

    def history(self, task_id: str) -> str:
        """List of a task's recorded events (JSON); index N-1 produced version N."""
        return f"{self.tag}:h:{escape_id(task_id)}"

    def callback(self, callback_id: str) -> str:
        """Marker that a callback id was applied."""
        return f"{self.tag}:c:{escape_id(callback_id)}"

    def delivery(self, idempotency_key: str) -> str:
        """A delivery receipt (JSON) under its idempotency key."""
        return f"{self.tag}:d:{escape_id(idempotency_key)}"

    def group(self, group_id: str) -> str:
        """Hash of a group's counters (extension)."""
        return f"{self.tag}:g:{escape_id(group_id)}"

    def group_members(self, group_id: str) -> str:
        """Sorted set of a group's member ids, by creation order."""
        return f"{self.tag}:gm:{escape_id(group_id)}"

    @property
    def group_outbox(self) -> str:
        """Stream of group notifications, one per declared group whose members all ended."""
        return f"{self.tag}:groups"

    def state_index(self, state: str) -> str:
        """Sorted set of the task ids in one state, scored by creation order."""
        return f"{self.tag}:idx:{state}"

    @property
    def state_indexes(self) -> list[str]:
        """One index per state, in ``STATE_NAMES`` order."""
        return [self.state_index(state) for state in STATE_NAMES]

    @property
    def sequence(self) -> str:
        """Counter giving each created task its creation order. A shard's counter names
        its shard (``:seq:<k>:<S>``): _create.lua then gives creation orders that are
        unique across the shards and follow the server's clock, so shards merge by them."""
        if self.shard_total == 1:
            return f"{self.tag}:seq"
        return f"{self.tag}:seq:{self.shard_index}:{self.shard_total}"

    @property
    def deadlines(self) -> str:
        """Sorted set of live task ids by deadline (``expiresAtMs``): the sweep's work list."""
        return f"{self.tag}:deadlines"

    @property
    def last_sweep(self) -> str:
        """String: when a sweep last ran (ms, the server's clock), written by the sweep."""
        return f"{self.tag}:swept"

    @property
    def sweep_lease(self) -> str:
        """String with a short expiry: which process sweeps the namespace this second."""
        return f"{self.tag}:sweep-lease"

    def batch_halt(self, token: str) -> str:
        """String, only inside one MULTI/EXEC of apply calls (``apply_many``), the batch's
        own (``token``): set by a call refused for facts, so that the calls after it write
        nothing; the batch's last call deletes it."""
        return f"{self.tag}:batch-halt:{token}"

    @property
    def stalls(self) -> str:
        """Sorted set of running task ids with a heartbeat timeout, by when they stall."""
        return f"{self.tag}:stalls"

    @property
    def counters(self) -> str:
        """Hash counting the book's answers by reason (for metrics)."""
        return f"{self.tag}:counters"

    @property
    def outbox(self) -> str:
        """Stream of notifications, one per terminal state."""
        return f"{self.tag}:outbox"

    def task_audit(self, task_id: str) -> str:
        """List of a task's audit entries (JSON), oldest first: its latest changes by hand."""
        return f"{self.tag}:a:{escape_id(task_id)}"

    @property
    def audit_log(self) -> str:
        """Stream of every audit entry of the namespace, capped (``XADD MAXLEN ~``)."""
        return f"{self.tag}:audit"

    # -- the operator console's keys (sent to lua/_info.lua in KEYS, see _facts.py) -----

    def info(self, task_id: str) -> str:
        """Hash of a task's long info fields: args, kwargs, traceback."""
        return f"{self.tag}:i:{escape_id(task_id)}"

    def message(self, task_id: str) -> str:
        """String: a task's message as published (``KeptMessage``), kept for a resend."""
        return f"{self.tag}:m:{escape_id(task_id)}"

    def name_index(self, state: str, name: str) -> str:
        """Sorted set of one task name's ids in one state, scored by creation order."""
        return f"{self.tag}:n:{state}:{escape_id(name)}"

    def name_indexes(self, name: str) -> list[str]:
        """One index per state for a task name, in ``STATE_NAMES`` order."""
        return [self.name_index(state, name) for state in STATE_NAMES]

    @property
    def names(self) -> str:
        """Sorted set of task names, scored by when a task of the name was last created."""
        return f"{self.tag}:names"

    def sort_index(self, field: str) -> str:
        """Sorted set of the task ids that have a value of ``field`` (started, ended,
        runtime, attempts), scored by it; ties in member order."""
        return f"{self.tag}:by:{field}"

    @property
    def sort_indexes(self) -> list[str]:
        """The sort indexes the scripts keep, in ``SORT_INDEXED`` order."""
        return [self.sort_index(field) for field in SORT_INDEXED]

    @property
    def workers(self) -> str:
        """Sorted set of workers, scored by when each was last seen."""
        return f"{self.tag}:workers"

    def worker_tasks(self, worker: str) -> str:
        """Sorted set of a worker's latest 1,000 tasks (ids), scored by creation order."""
        return f"{self.tag}:w:{escape_id(worker)}"

    def worker_counts(self, worker: str) -> str:
        """Hash of a worker's counts: started, succeeded, failed."""
        return f"{self.tag}:wc:{escape_id(worker)}"

    def stats(self, hour: int, name: str | None) -> str:
        """Hash of one hour's per-minute counts, of one task name or (None) of all."""
        if name is None:
            return f"{self.tag}:sa:{hour}"
        return f"{self.tag}:s:{hour}:{escape_id(name)}"

    @property
    def name_totals(self) -> str:
        """Hash of running totals per task name (``<name>|<code>``, ``<name>|<code>:<bucket>``
        and ``<name>|sum``: lua/_info.lua's count_minute)."""
        return f"{self.tag}:nt"

    def children(self, parent_id: str) -> str:
        """Sorted set of the tasks a task started (Celery's parent id), by creation order."""
        return f"{self.tag}:ch:{escape_id(parent_id)}"

    @property
    def changes_channel(self) -> str:
        """Pub/sub channel announcing every change: JSON taskId, version, state, progress."""
        return f"{self.tag}:changes"

    @property
    def cancels_channel(self) -> str:
        """Pub/sub channel announcing cancels only (the same message as on the changes
        channel): what workers follow."""
        return f"{self.changes_channel}:cancelled"
