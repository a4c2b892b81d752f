"""The workers' records (``asyncbook._fleet``) on the namespace's first shard: each
worker's last record (``wr``, kept a day), a key present while it is online (``wl``,
expiring after the silence) and the workers by when they renewed (``fleet``, trimmed to
a day and 500 workers). A renewal is one TIME and one MULTI/EXEC of six commands."""

from __future__ import annotations

from typing import Any

from .._fleet import WORKER_HISTORY_MS, WORKER_RECORDS_KEPT, WORKER_SILENCE_MS, WorkerRecord
from ._merged import MergedPlan, on
from ._namespace import Namespace
from ._plan import Pipeline, Plan, command, server_time
from ._replies import text_of

__all__ = ["announce_worker", "retire_worker", "worker_records"]


def _write(ns: Namespace, record: WorkerRecord, stopping: bool) -> Plan[int]:
    now = yield from server_time()
    k, name = ns.first.keys, record.name
    stopped = now if stopping else None
    kept = record.model_copy(update={"renewed_ms": now, "stopped_ms": stopped})
    live = (
        command("delete", k.worker_live(name))
        if stopping
        else command("set", k.worker_live(name), record.pid, px=WORKER_SILENCE_MS)
    )
    yield Pipeline(
        [
            command("set", k.worker_record(name), kept.model_dump_json(), px=WORKER_HISTORY_MS),
            live,
            command("zadd", k.fleet, {name: now}),
            command("zremrangebyscore", k.fleet, "-inf", now - WORKER_HISTORY_MS),
            command("zremrangebyrank", k.fleet, 0, -WORKER_RECORDS_KEPT - 1),
            command("pexpire", k.fleet, WORKER_HISTORY_MS),
        ],
        transaction=True,
    )
    return now


def announce_worker(ns: Namespace, record: WorkerRecord) -> MergedPlan[int]:
    """Renew a worker's record (online for ``WORKER_SILENCE_MS`` more); returns the book's
    now (ms)."""
    return on(0, _write(ns, record, False))


def retire_worker(ns: Namespace, record: WorkerRecord) -> MergedPlan[int]:
    """Mark a worker offline at once (a graceful shutdown), keeping its last record."""
    return on(0, _write(ns, record, True))


def _records(ns: Namespace) -> Plan[tuple[list[tuple[WorkerRecord, bool]], int]]:
    k = ns.first.keys
    now = yield from server_time()
    names = [
        text_of(name) for name in (yield command("zrevrange", k.fleet, 0, WORKER_RECORDS_KEPT - 1))
    ]
    if not names:
        return [], now
    keys: list[Any] = [*map(k.worker_record, names), *map(k.worker_live, names)]
    values = yield Pipeline([command("get", key) for key in keys])
    found = []
    for raw, live in zip(values[: len(names)], values[len(names) :], strict=True):
        if raw is not None:
            found.append((WorkerRecord.model_validate_json(raw), live is not None))
    return found, now


def worker_records(ns: Namespace) -> MergedPlan[tuple[list[tuple[WorkerRecord, bool]], int]]:
    """Every worker record kept, each with whether its worker is online, the most
    recently renewed first; and the book's now (ms)."""
    return on(0, _records(ns), writes=False)
