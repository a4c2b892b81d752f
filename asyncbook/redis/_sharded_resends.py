"""Resends on a namespace of several shards: each task's resend in its shard.

A resend is one decision: resend.lua, in one call, checks that the task was never
resent, creates the new task and links the two. On a sharded book the new task's id is
picked in the original's shard (a random UUID, drawn again until it hashes there: S
draws on average), so that call stays one script on one hash tag, exactly as on one
shard: two resends of a task at once still create one new task. Tasks of different
shards are resent a shard per thread (``claim_resends`` on each shard's engine).
``claim_book_resends`` picks the way for any book.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .._checks import require_string
from ._args import utf8
from ._merged import FIX_COUNT, MergedPlan, OnShards
from ._namespace import Namespace
from ._resends import ResendClaim, fresh_id, resend_audit, resends

if TYPE_CHECKING:
    from ._book import RedisBook

__all__ = ["claim_book_resends", "claim_sharded_resends", "namespace_resends"]


def _in_shard(ns: Namespace, index: int) -> Callable[[str], str]:
    """New ids of shard ``index``."""

    def new_id(original: str) -> str:
        while True:
            candidate = fresh_id(original)
            if ns.index_of(candidate) == index:
                return candidate

    return new_id


def namespace_resends(
    ns: Namespace,
    task_ids: Sequence[str],
    *,
    actor: str | None = None,
    reason: str | None = None,
) -> MergedPlan[list[ResendClaim]]:
    """``resends`` of each task in its shard, its new task beside it (the shards at
    once); the answers in the order of ``task_ids``. Bad input (an id, the actor, the
    reason) is refused before any shard is written."""
    ids = [utf8(require_string(task_id, "taskId"), "taskId") for task_id in task_ids]
    audit = resend_audit(ns.shards[0], actor, reason)
    if not ids:
        return []
    if ns.count > 1:
        yield FIX_COUNT
    by_shard: dict[int, list[int]] = {}
    for at, task_id in enumerate(ids):
        by_shard.setdefault(ns.index_of(task_id), []).append(at)
    shards = tuple(by_shard)
    plans = tuple(
        resends(
            ns.shards[index],
            [ids[at] for at in by_shard[index]],
            audit,
            _in_shard(ns, index) if ns.count > 1 else fresh_id,
        )
        for index in shards
    )
    answers = yield OnShards(plans, shards, writes=True)
    out: list[ResendClaim | None] = [None] * len(ids)
    for index, claims in zip(shards, answers, strict=True):
        for at, found in zip(by_shard[index], claims, strict=True):
            out[at] = found
    return [found for found in out if found is not None]


def claim_book_resends(
    book: RedisBook,
    task_ids: Sequence[str],
    *,
    actor: str | None = None,
    reason: str | None = None,
) -> list[ResendClaim]:
    """``claim_resends`` on ``book``, one shard or many: what a publisher calls."""
    return book.driver.run(namespace_resends(book.ns, task_ids, actor=actor, reason=reason))


claim_sharded_resends = claim_book_resends
"""The name of a sharded book's resends before one namespace plan ran every layout."""
