"""The indexer: the console's indexes built off the write path, from the change stream
each write appends to (``KeySchema.index_changes``, _info.lua's ``index_change``).

A batch is the stream's head: read here, its keys named, applied and trimmed by one
index.lua call, which refuses when the head moved (another indexer took it). So two
indexers never apply an entry twice and a crash leaves no half batch. The worker's service
thread runs it (``Upkeep``); every read of the indexes catches up first, a bounded number
of batches, and says how far behind they stayed (``IndexLag``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from redis.exceptions import NoPermissionError, OutOfMemoryError, ReadOnlyError

from .._console import IndexLag
from ._merged import MergedPlan, every
from ._plan import Pipeline, Plan, ScriptCall, command, server_time
from ._replies import text_of
from ._script_args import IndexArgs
from ._scripts import ScriptStatus
from ._shard import Shard

__all__ = ["BATCH", "READ_BATCHES", "catch_up", "caught_up"]

BATCH = 500
"""Entries applied per script call."""
READ_BATCHES = 20
"""How many batches a read of the indexes applies, at most, before it answers."""
OPERANDS_PER_CALL = 512
"""Operands (members, or scores and members) of one ZADD or ZREM of index.lua, at most."""


RUNTIME_BOUNDS = (
    *(100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 120000),
    *(300000, 600000, 1800000, 3600000),
)
"""A run's runtime bucket i: the first bound it is within (the last bucket: above all)."""
FAILED_UNIT = 2**31
"""'<minute>:r<i>' counts a failed run as 2^31, a succeeded one as 1 (_stats.py splits)."""


def hour_of(ms: float) -> str:
    """The hour a time falls in, as the stats keys spell it."""
    return str(math.floor(ms / 3_600_000))


def _number(text: str) -> str:
    """A sum's text as HINCRBY takes it (Lua's '%.0f')."""
    return text if text.isdigit() else f"{float(text):.0f}"


class _Batch:
    """The writes of one batch, summed and in order: every key in KEYS once (the ops name
    its slot), a task's state moves as one, one HINCRBY per hash and field."""

    def __init__(self, shard: Shard) -> None:
        self.k = shard.keys
        self.keys: list[str] = [self.k.index_changes]
        self.slots: dict[str, str] = {}
        self.groups: dict[str, dict[str, dict[str, str]]] = {"r": {}, "z": {}, "g": {}}
        self.chains: dict[str, dict[str, Any]] = {}
        self.started: dict[str, int] = {}  # worker -> starts
        self.sums: dict[tuple[str, str], list[Any]] = {}  # (key, field) -> [by, expires]

    def slot(self, key: str) -> str:
        at = self.slots.get(key)
        if at is None:
            self.keys.append(key)
            at = self.slots[key] = str(len(self.keys))
        return at

    def add(self, key: str, field: str, by: float, expires: bool = False) -> None:
        summed = self.sums.setdefault((key, field), [0, expires])
        summed[0] += by

    def put(self, op: str, key: str, member: str, score: str = "") -> None:
        """A member of a key's one ZREM ('r'), ZADD ('z': last wins) or ZADD GT ('g')."""
        members = self.groups[op].setdefault(self.slot(key), {})
        if op != "g" or float(score) > float(members.get(member, "-inf")):
            members[member] = score

    def move(self, chain: dict[str, Any]) -> None:
        """A task's moves in the batch as one: its first state out, its last one in. (Only
        a task's first chain in a batch has a state out: removals may go first.)"""
        index, named, member = self.k.state_index, chain["n"], chain["i"]
        for state, op in (chain["f"], "r"), (chain["t"], "z"):
            if state:
                self.put(op, index(state), member, chain["q"])
                if named is not None:
                    self.put(op, self.k.name_index(state, named), member, chain["q"])

    def minute(self, name: str | None, at: float, code: str, runtime: float | None) -> None:
        """One count (and a runtime) of one minute, for the task's name and every name."""
        field = minute_code = code
        by = 1
        if runtime is not None:
            bucket = next((i for i, b in enumerate(RUNTIME_BOUNDS) if runtime <= b), 14)
            field, minute_code = f"{code}:{bucket}", f"r{bucket}"
            by = FAILED_UNIT if code == "failed" else 1
        minute_field, hour = f"{math.floor(at / 60000) % 60}:{minute_code}", hour_of(at)
        self.add(self.k.stats(int(hour), None), minute_field, by, True)
        if name is not None:
            self.add(self.k.stats(int(hour), name), minute_field, by, True)
            self.add(self.k.name_totals, f"{name}|{field}", 1)
            if runtime is not None:
                self.add(self.k.name_totals, f"{name}|sum", runtime)

    def entry(self, f: dict[str, str]) -> None:
        """One change (_info.lua's index_change), as index.lua applied it one by one."""
        i, name, worker = f["i"], f.get("n"), f.get("w")
        packed = f["m"].split("|")  # _info.lua's index_change: q f t c s a e r
        q, before, after, created, start, attempts, end, runtime = packed
        if after:
            chain = self.chains.get(i)
            if chain is not None and before:
                chain["t"] = after  # the task moved on: only where it ends up is written
            else:
                if chain is not None:
                    self.move(chain)  # a create of an id whose earlier task moved in the batch
                self.chains[i] = {"i": i, "q": q, "f": before, "t": after, "n": name}
        if created and name is not None:
            self.put("z", self.k.names, name, created)
        for value, index in zip((start, end, runtime, attempts), self.k.sort_indexes, strict=True):
            if value:
                self.put("z", index, i, value)
        if start:
            if worker is not None:
                self.put("z", self.k.worker_tasks(worker), i, q)
                self.started[worker] = self.started.get(worker, 0) + 1
                self.put("g", self.k.workers, worker, start)
            self.minute(name, float(start), "S", None)
        if end:
            ran = float(runtime) if runtime else None
            if ran is not None and worker is not None:
                self.add(self.k.worker_counts(worker), after, 1)
            self.minute(name, float(end), after, ran)

    def ops(self) -> list[str]:
        """index.lua's ARGV after the batch's ids (see index.lua)."""
        for chain in self.chains.values():
            self.move(chain)
        ops: list[str] = []
        for op, groups in self.groups.items():
            for slot, members in groups.items():
                flat = [*members] if op == "r" else [x for m in members for x in (members[m], m)]
                for at in range(0, len(flat), OPERANDS_PER_CALL):
                    part = flat[at : at + OPERANDS_PER_CALL]
                    ops += [op, slot, str(len(part)), *part]
        for worker, starts in self.started.items():
            tasks = self.slot(self.k.worker_tasks(worker))
            ops += ["w", self.slot(self.k.worker_counts(worker)), tasks, str(starts)]
        for (key, field), (by, expires) in self.sums.items():
            ops += ["x" if expires else "h", self.slot(key), field, _number(str(by))]
        return ops


def index_batch(shard: Shard, size: int = BATCH) -> Plan[int]:
    """One batch of at most ``size`` entries indexed: how many (-1: another indexer took
    the batch read). The writes are worked out here, summed (``_Batch``); index.lua checks
    the batch is still the stream's head, applies them and trims the batch."""
    rows = yield command("xrange", shard.keys.index_changes, "-", "+", count=size)
    if not rows:
        return 0
    batch = _Batch(shard)
    for _, raw in rows:
        batch.entry({text_of(key): text_of(value) for key, value in raw.items()})
    ops = batch.ops()
    args = IndexArgs(text_of(rows[0][0]), text_of(rows[-1][0])).argv()
    reply = yield ScriptCall("index", batch.keys, [*args, *ops])
    return -1 if text_of(reply[0]) == ScriptStatus.MOVED else len(rows)


def catch_up(shard: Shard, batches: int = READ_BATCHES, size: int = BATCH) -> Plan[IndexLag]:
    """Up to ``batches`` batches indexed; then how far behind the shard is: the entries
    still to apply and the age of the oldest (the server's clock). A server that refuses
    the index's writes (maxmemory, a replica, a read-only user) leaves it behind: the read
    goes on, and says so."""
    for _ in range(batches):
        try:
            if 0 <= (yield from index_batch(shard, size)) < size:
                return IndexLag()
        except (OutOfMemoryError, ReadOnlyError, NoPermissionError):
            break
    k = shard.keys
    length, head = yield Pipeline(
        [command("xlen", k.index_changes), command("xrange", k.index_changes, count=1)]
    )
    if not head:
        return IndexLag()
    oldest = int(text_of(head[0][0]).partition("-")[0])
    return IndexLag(entries=length, oldest_age_ms=max(0, (yield from server_time()) - oldest))


def caught_up(shards: Sequence[Shard], batches: int = READ_BATCHES) -> MergedPlan[IndexLag]:
    """Every shard's indexes caught up (at most ``batches`` batches each), first thing of
    a read of the indexes: how far behind they stayed (entries summed, the oldest's age)."""
    lags: list[IndexLag] = yield every(shards, lambda shard: catch_up(shard, batches), writes=True)
    ages = [lag.oldest_age_ms for lag in lags if lag.oldest_age_ms is not None]
    return IndexLag(entries=sum(lag.entries for lag in lags), oldest_age_ms=max(ages, default=None))
