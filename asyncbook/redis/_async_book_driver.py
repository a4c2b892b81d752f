"""The asyncio driver: runs a namespace's plans (``_merged``) on a ``redis.asyncio``
client, as ``Driver`` runs them on redis-py: one ``AsyncEngine`` per shard, several
shards' plans awaited at once (``asyncio.gather``), ``Sleep`` awaited, the shard count
checked, and an outage reported as ``RedisUnavailableError``.
"""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

from redis.exceptions import AuthenticationError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ._async_engine import AsyncEngine
from ._connection import RedisUnavailableError
from ._merged import FixCount, MergedPlan, NamespaceCall, OneShard, OnShards, Sleep
from ._namespace import Namespace
from ._plan import run_async

__all__ = ["AsyncDriver"]

_T = TypeVar("_T")


class AsyncDriver:
    """Runs namespace plans on a ``redis.asyncio`` client (or Cluster client)."""

    def __init__(self, client: Any, ns: Namespace) -> None:
        self.client = client
        self.ns = ns
        self.engines = [AsyncEngine(client, shard, ns.wait) for shard in ns.shards]
        """One engine per shard, in shard order."""
        self.home = self.engines[0] if ns.count == 1 else AsyncEngine(client, ns.home, ns.wait)
        """The engine on the namespace's own tag (its shard count)."""

    async def run(self, plan: NamespaceCall[_T]) -> _T:
        """Run ``plan`` (after the namespace's shard count check); an outage raises
        ``RedisUnavailableError``."""
        try:
            if not self.ns.count_check.settled:
                await self.home.run(self.ns.count_check.check())
            if type(plan) is OneShard:
                return await self.engines[plan.index].run(plan.plan)
            assert not isinstance(plan, OneShard)
            return await self._drive(plan)
        except (RedisUnavailableError, AuthenticationError):
            raise
        except (RedisConnectionError, RedisTimeoutError) as error:
            raise RedisUnavailableError(f"the book's Redis did not answer: {error}") from error

    async def _drive(self, plan: MergedPlan[_T]) -> _T:
        return await run_async(plan, self._step)

    async def _step(self, step: OnShards | Sleep | FixCount) -> Any:
        """One step of a namespace plan: its answer (an error is thrown into the plan)."""
        if isinstance(step, Sleep):
            return await asyncio.sleep(step.seconds)
        if isinstance(step, FixCount):
            return await self.home.run(self.ns.count_check.fix())
        return await self._on_shards(step)

    async def _on_shards(self, step: OnShards) -> list[Any]:
        indexes = range(self.ns.count) if step.shards is None else step.shards
        engines = [self.engines[index] for index in indexes]
        if len(step.plans) == 1:
            return [await engines[0].run(step.plans[0])]
        runs = (engine.run(plan) for engine, plan in zip(engines, step.plans, strict=True))
        return list(await asyncio.gather(*runs))
