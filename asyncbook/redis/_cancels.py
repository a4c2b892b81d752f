"""``RedisBook.cancel_many``: many tasks cancelled, each with its audit entry, ``CHUNK``
per cancel_many.lua call.

The script applies each cancel with apply.lua's ``apply_event`` and writes its entry
with cancel.lua's ``write_audit``, so every task gets the answer, writes, notification
and entry ``cancel`` with an actor gives it; only the transport differs (one script call
per chunk of a shard, as ``expire_many``'s, ``_expiries``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from .._book import cancel_input
from ..errors import AsyncBookError
from . import _audit as audits
from . import _operations as operations
from ._expiries import Resend, in_chunks, many_call, read_chunk
from ._plan import Plan, server_time
from ._script_args import ApplyArgs, AuditArgs
from ._scripts import EventOutcome
from ._shard import Shard
from ._task_ops import Outcome

__all__ = ["cancel_many"]


def cancel_many(
    shard: Shard,
    task_ids: Iterable[Any],
    actor: str,
    reason: str | None,
    at_ms: int | float | None,
    times: dict[str, int | float],
) -> Plan[list[Outcome]]:
    """Each task cancelled at ``at_ms`` (the server's clock, read once per script call,
    when None) and audited as ``actor``'s, in order; an id the book refuses, or a task
    it cannot cancel, answers its error in its place; ``times`` notes each id's cancel
    time. A bad ``actor`` raises (nothing written)."""
    entry = audits.cancel_entry(shard, actor, reason)
    assert entry is not None

    def run(ids: list[str]) -> Plan[list[Outcome]]:
        at = (yield from server_time()) if at_ms is None else at_ms
        times.update(dict.fromkeys(ids, at))
        _keys, event, shape_error = shard.apply_call(ids[0], cancel_input(at, reason), None)
        event = dataclasses.replace(event, task_id="")
        return (
            yield from _cancel_chunk(shard, ids, event, entry(shape_error is None), shape_error)
        )

    return (yield from in_chunks(shard, task_ids, run))


def _cancel_chunk(
    shard: Shard,
    ids: list[str],
    event: ApplyArgs,
    audit: AuditArgs,
    shape_error: AsyncBookError | None,
) -> Plan[list[Outcome]]:
    """cancel_many.lua's answers for these tasks, read as ``read_chunk`` reads an
    expiry's (a task refused for facts goes again with them; again refused, alone)."""

    how = Resend(
        lambda again: many_call(shard, again, event, audit),
        lambda task_id, _full: operations.apply_one(
            shard,
            shard.apply_call(task_id, None, None)[0],
            dataclasses.replace(event, task_id=task_id),
            audit,
        ),
        shape_error,
    )
    answers = list((yield many_call(shard, ids, event, audit)))
    read = yield from read_chunk(shard, ids, answers, True, how)
    return [r for r in read if not isinstance(r, EventOutcome)]  # full answers: none
