"""The stored trace contexts of tasks (``PublishInfo.trace``, kept in the task's hash as
``tc`` with ``asyncbook_tracing``), read for many tasks at once (``TraceStore``)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from .._trace_store import StoredTrace
from ._merged import MergedPlan, OnShards
from ._namespace import Namespace
from ._plan import Pipeline, Plan, command
from ._replies import text_of
from ._shard import Shard

__all__ = ["stored_traces"]


def stored_traces(ns: Namespace, task_ids: Sequence[str]) -> MergedPlan[dict[str, StoredTrace]]:
    """Each task's stored trace context (with its name and error), for those of
    ``task_ids`` that have one (a task gone, or created without tracing, has none): one
    pipelined round trip per shard, the shards at once."""
    ids = list(dict.fromkeys(task_ids))
    if not ids:
        return {}
    parts = ns.by_shard(ids)
    indexes = tuple(parts)
    answers = yield OnShards(
        tuple(_read(ns.shards[i], [ids[at] for at in parts[i]]) for i in indexes), indexes
    )
    return {task_id: stored for answer in answers for task_id, stored in answer}


def _read(shard: Shard, ids: list[str]) -> Plan[list[tuple[str, StoredTrace]]]:
    k = shard.keys
    replies = yield Pipeline([command("hmget", k.task(id), "tc", "n", "err") for id in ids])
    found = []
    for task_id, (trace, name, error) in zip(ids, replies, strict=True):
        if trace is None:
            continue
        text = None if error is None else json.loads(text_of(error))
        stored = StoredTrace(
            text_of(trace),
            None if name is None else text_of(name),
            text if isinstance(text, str) else None,
        )
        found.append((task_id, stored))
    return found
