"""The indexer: the console's indexes built off the write path, from the change stream
each write appends to (``KeySchema.index_changes``, _info.lua's ``index_change``).

A batch is the stream's head: read here, its keys named, applied and trimmed by one
index.lua call, which refuses when the head moved (another indexer took it). So two
indexers never apply an entry twice and a crash leaves no half batch. The worker's service
thread runs it (``Upkeep``); every read of the indexes catches up first, a bounded number
of batches, and says how far behind they stayed (``IndexLag``).
"""

from __future__ import annotations

import json
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


def hour_of(ms: float) -> str:
    """The hour a time falls in, as the stats keys spell it (index.lua's hour_of)."""
    return str(math.floor(ms / 3_600_000))


def index_batch(shard: Shard, size: int = BATCH) -> Plan[int]:
    """One batch of at most ``size`` entries indexed: how many (-1: another indexer took
    the batch read)."""
    k = shard.keys
    rows = yield command("xrange", k.index_changes, "-", "+", count=size)
    if not rows:
        return 0
    keys = [k.index_changes, *k.state_indexes, *k.sort_indexes, k.names, k.name_totals, k.workers]
    slots: dict[str, dict[str, Any]] = {"n": {}, "h": {}, "s": {}, "w": {}}

    def slot(at: dict[str, Any], what: str, *named: str) -> None:
        if what not in at:
            at[what] = len(keys) + 1
            keys.extend(named)

    for _, raw in rows:
        f = {text_of(key): text_of(value) for key, value in raw.items()}
        name, packed = f.get("n"), f["m"].split("|")  # _info.lua's CHANGE: q f t c s a e r
        if name is not None:
            slot(slots["n"], name, *k.name_indexes(name))
        if "w" in f:
            slot(slots["w"], f["w"], k.worker_tasks(f["w"]), k.worker_counts(f["w"]))
        for at in filter(None, (packed[4], packed[6])):  # the start's and the end's ms
            hour = hour_of(float(at))
            slot(slots["h"], hour, k.stats(int(hour), None))
            if name is not None:
                slot(slots["s"].setdefault(hour, {}), name, k.stats(int(hour), name))
    args = IndexArgs(
        text_of(rows[0][0]), text_of(rows[-1][0]), json.dumps(slots, ensure_ascii=False)
    )
    reply = yield ScriptCall("index", keys, args.argv())
    return -1 if text_of(reply[0]) == ScriptStatus.MOVED else int(reply[1])


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
