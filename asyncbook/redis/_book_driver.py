"""The drivers: run a namespace's plans (``_merged``), ``Driver`` on a redis-py client and
``AsyncDriver`` on a ``redis.asyncio`` one, each with one engine per shard (``Engine``,
``AsyncEngine``: a shard's requests, with NOSCRIPT and the replica wait).

Both answer a namespace plan's steps alike: one shard's plan on its engine; ``Sleep``;
the shard count's check before each call (``CountCheck``); an outage (redis-py giving up)
raised as ``RedisUnavailableError``. Only several shards' plans run differently: the sync
driver sends reads together, one pipeline per node (``run_together``), and writes a
thread each; the asyncio driver awaits them at once (``asyncio.gather``). The sync driver
also reports a Cluster node refusing the slot (MOVED, CLUSTERDOWN) as an outage, after
the Cluster's slots are read again so that the next call finds a promoted replica.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Generic, NoReturn, TypeVar

from redis.exceptions import AuthenticationError, ClusterDownError, MovedError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ._connection import RedisUnavailableError, rediscover
from ._engine import AsyncEngine, Engine
from ._merged import FixCount, NamespaceCall, OneShard, OnShards, Sleep
from ._namespace import Namespace
from ._plan import run, run_async
from ._replicas import ReplicaWait
from ._shard import Shard
from ._together import Threads, run_together

__all__ = ["AsyncDriver", "Driver"]

_T = TypeVar("_T")
_E = TypeVar("_E", Engine, AsyncEngine)


class _Drives(Generic[_E]):
    """What both drivers hold: the client, the namespace and its shards' engines."""

    outages: ClassVar[tuple[type[Exception], ...]] = (RedisConnectionError, RedisTimeoutError)
    """What redis-py raises when it gives up on Redis (``RedisUnavailableError``)."""

    def __init__(
        self, client: Any, ns: Namespace, engine: Callable[[Any, Shard, ReplicaWait], _E]
    ) -> None:
        self.client = client
        self.ns = ns
        self.engines: list[_E] = [engine(client, shard, ns.wait) for shard in ns.shards]
        """One engine per shard, in shard order."""
        self.home: _E = self.engines[0] if ns.count == 1 else engine(client, ns.home, ns.wait)
        """The engine on the namespace's own tag (its shard count)."""

    def _engines(self, step: OnShards) -> list[_E]:
        indexes = range(self.ns.count) if step.shards is None else step.shards
        return [self.engines[index] for index in indexes]

    def _outage(self, error: Exception) -> NoReturn:
        rediscover(self)
        if isinstance(error, RedisUnavailableError):
            raise error
        raise RedisUnavailableError(f"the book's Redis did not answer: {error}") from error


class Driver(_Drives[Engine]):
    """Runs namespace plans on a redis-py client (a Redis, a Cluster, Sentinel's master,
    fakeredis)."""

    outages = (RedisConnectionError, RedisTimeoutError, MovedError, ClusterDownError)

    def __init__(self, client: Any, ns: Namespace) -> None:
        super().__init__(client, ns, Engine)
        self.pool = Threads(min(8, ns.count), "asyncbook-shards")
        """The threads that run several shards' writes at once."""

    def run(self, plan: NamespaceCall[_T]) -> _T:
        """Run ``plan`` (after the namespace's shard count check); an outage raises
        ``RedisUnavailableError``."""
        try:
            if not self.ns.count_check.settled:
                self.home.run(self.ns.count_check.check())
            if type(plan) is OneShard:
                return self.engines[plan.index].run(plan.plan)
            assert not isinstance(plan, OneShard)
            return run(plan, self._step)
        except AuthenticationError:
            raise  # wrong credentials are not an outage: retrying cannot help
        except self.outages as error:
            self._outage(error)

    def _step(self, step: OnShards | Sleep | FixCount) -> Any:
        """One step of a namespace plan: its answer (an error is thrown into the plan)."""
        if type(step) is OnShards and len(step.plans) == 1:  # one shard's plan: most calls
            return [self.engines[step.shards[0] if step.shards else 0].run(step.plans[0])]
        if isinstance(step, Sleep):
            return time.sleep(step.seconds)
        if isinstance(step, FixCount):
            return self.home.run(self.ns.count_check.fix())
        engines = self._engines(step)
        if not step.writes:
            return run_together(engines, step.plans)
        pairs = list(zip(engines, step.plans, strict=True))
        return list(self.pool().map(lambda pair: pair[0].run(pair[1]), pairs))

    def shard_map(self) -> dict[str, list[int]]:
        """Which node holds which shards: ``host:port`` (or the socket's path) -> shard
        indexes."""
        nodes: dict[str, list[int]] = {}
        for index, engine in enumerate(self.engines):
            kwargs = engine.slot_client().connection_pool.connection_kwargs
            node = f"{kwargs.get('host') or kwargs.get('path')}:{kwargs.get('port', '')}"
            nodes.setdefault(node, []).append(index)
        return nodes

    def by_node(self, call: Callable[[int], _T]) -> list[_T]:
        """``call(index)`` for each shard: the shards of one node in turn, the nodes at
        once (a thread each); the answers in shard order."""
        nodes: Sequence[list[int]] = list(self.shard_map().values())
        if len(nodes) == 1:
            return [call(index) for index in range(self.ns.count)]

        def in_turn(indexes: list[int]) -> list[tuple[int, _T]]:
            return [(index, call(index)) for index in indexes]

        answers = dict(pair for pairs in self.pool().map(in_turn, nodes) for pair in pairs)
        return [answers[index] for index in range(self.ns.count)]


class AsyncDriver(_Drives[AsyncEngine]):
    """Runs namespace plans on a ``redis.asyncio`` client (or Cluster client)."""

    def __init__(self, client: Any, ns: Namespace) -> None:
        super().__init__(client, ns, AsyncEngine)

    async def run(self, plan: NamespaceCall[_T]) -> _T:
        """``Driver.run``, awaited."""
        try:
            if not self.ns.count_check.settled:
                await self.home.run(self.ns.count_check.check())
            if type(plan) is OneShard:
                return await self.engines[plan.index].run(plan.plan)
            assert not isinstance(plan, OneShard)
            return await run_async(plan, self._step)
        except AuthenticationError:
            raise
        except self.outages as error:
            self._outage(error)

    async def _step(self, step: OnShards | Sleep | FixCount) -> Any:
        if isinstance(step, Sleep):
            return await asyncio.sleep(step.seconds)
        if isinstance(step, FixCount):
            return await self.home.run(self.ns.count_check.fix())
        engines = self._engines(step)
        if len(step.plans) == 1:
            return [await engines[0].run(step.plans[0])]
        runs = (engine.run(plan) for engine, plan in zip(engines, step.plans, strict=True))
        return list(await asyncio.gather(*runs))
