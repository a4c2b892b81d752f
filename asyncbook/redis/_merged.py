"""Merged plans: a read over every shard of a sharded namespace, as a generator that
yields ``OnShards`` (one plan per shard) and is sent their answers. Like a plan
(``_plan``) it does no I/O: ``ShardedRedisBook`` answers ``OnShards`` with
``run_together`` (one pipeline per node at each step), ``AsyncShardedRedisBook`` with
``asyncio.gather``, so both books merge alike (``_sharded_console``, ``_sharded_groups``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

from ._plan import Plan

__all__ = ["MergedPlan", "OnShards", "drive", "drive_async"]

_T = TypeVar("_T")


@dataclass(frozen=True)
class OnShards:
    """Run one plan per shard (``shards``: which; None: every shard, in order) and send
    their answers back, in order."""

    plans: tuple[Plan[Any], ...]
    shards: tuple[int, ...] | None = None


MergedPlan = Generator[OnShards, list[Any], _T]
"""A read over the shards: yields ``OnShards``, returns the merged answer."""


def drive(plan: MergedPlan[_T], on_shards: Callable[[OnShards], list[Any]]) -> _T:
    """Run a merged plan, each ``OnShards`` by ``on_shards``."""
    try:
        step = next(plan)
        while True:
            step = plan.send(on_shards(step))
    except StopIteration as stop:
        answer: _T = stop.value
        return answer


async def drive_async(
    plan: MergedPlan[_T], on_shards: Callable[[OnShards], Awaitable[list[Any]]]
) -> _T:
    """``drive`` with an ``on_shards`` to await."""
    try:
        step = next(plan)
        while True:
            step = plan.send(await on_shards(step))
    except StopIteration as stop:
        answer: _T = stop.value
        return answer
