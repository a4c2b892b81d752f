"""The drivers: run a namespace's plans (``_merged``), ``Driver`` on a redis-py client and
``AsyncDriver`` on a ``redis.asyncio`` one, each with one engine per shard (``_engine``).

Both check the shard count before each call (``CountCheck``) and raise an outage
(redis-py giving up) as ``RedisUnavailableError``. Several shards' plans the asyncio
driver awaits at once; the sync driver runs writes a thread each, reads together
(``run_together``), and also reports a Cluster node refusing the slot (MOVED,
CLUSTERDOWN) as an outage, after the slots are read again so that the next call finds a
promoted replica."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar, Generic, NoReturn, TypeVar

from redis.exceptions import AuthenticationError, ClusterDownError, MovedError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ._connection import RedisUnavailableError, rediscover
from ._driver import answered, queued
from ._engine import AsyncEngine, Engine
from ._merged import FixCount, NamespaceCall, OneShard, OnShards, Sleep
from ._namespace import Namespace
from ._plan import Command, Pipeline, Plan, advance, run, run_async

__all__ = ["AsyncDriver", "Driver", "run_together"]

_T = TypeVar("_T")
_E = TypeVar("_E", Engine, AsyncEngine)


class _Running:
    """One plan being run: its engine, the request it waits on, or its answer."""

    def __init__(self, engine: Engine, plan: Plan[Any]) -> None:
        self.engine = engine
        self.plan = plan
        self.commands: list[Command] = []
        """The commands that send ``step`` in its node's pipeline."""
        self.done, self.step = advance(plan, None, None)


def run_together(engines: Sequence[Engine], plans: Sequence[Plan[_T]]) -> list[_T]:
    """Run ``plans[i]`` on ``engines[i]``, all in lock step; their answers, in order:
    each step's requests of every plan go out in one pipeline per Redis node, the nodes'
    pipelines at once, so a read over S shards costs the round trips of one plan, not S
    times them. Meant for reads: a writing script's replica wait is not sent here.

    A request meets what it would meet run alone (``queued``, ``answered``); one that
    goes alone is run by its engine."""
    running = [_Running(engine, plan) for engine, plan in zip(engines, plans, strict=True)]
    while True:
        waiting = [each for each in running if not each.done]
        if not waiting:
            return [each.step for each in running]
        by_node: dict[int, list[_Running]] = {}
        for each in waiting:
            commands = queued(each.engine, each.step)
            if commands is None:
                try:
                    reply, error = each.engine.execute(each.step), None
                except Exception as failed:
                    reply, error = None, failed
                each.done, each.step = advance(each.plan, reply, error)
                continue
            each.commands = commands
            by_node.setdefault(id(each.engine.slot_client()), []).append(each)
        nodes = list(by_node.values())
        if len(nodes) > 1:  # the nodes' pipelines at once
            sent = threads(8, "asyncbook-nodes", os.getpid()).map(_send, nodes)
        else:
            sent = map(_send, nodes)
        for group, (replies, met) in zip(nodes, list(sent), strict=True):
            if met is not None:  # a lost connection: every plan of the node meets it
                for each in group:
                    each.done, each.step = advance(each.plan, None, met)
                continue
            at = 0
            for each in group:
                count = len(each.commands)
                reply, error = answered(each.engine, each.step, replies[at : at + count])
                at += count
                each.done, each.step = advance(each.plan, reply, error)


def _send(group: list[_Running]) -> tuple[list[Any], Exception | None]:
    """One node's pipeline of its plans' requests: the replies, or the error it met."""
    commands = [command for each in group for command in each.commands]
    try:
        return group[0].engine.send(Pipeline(commands, errors_as_replies=True)), None
    except Exception as met:
        return [], met


_POOLS: dict[tuple[int, str, int], ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def threads(size: int, name: str, pid: int) -> ThreadPoolExecutor:
    """A pool of ``size`` threads to run calls at once, per process (``pid``: a fork
    starts its own), made once even when threads ask for it at the same time."""
    with _POOLS_LOCK:
        pool = _POOLS.get((size, name, pid))
        if pool is None:
            pool = _POOLS[size, name, pid] = ThreadPoolExecutor(size, thread_name_prefix=name)
        return pool


class _Drives(Generic[_E]):
    """What both drivers hold: the client, the namespace and its shards' engines."""

    outages: ClassVar[tuple[type[Exception], ...]] = (RedisConnectionError, RedisTimeoutError)
    """What redis-py raises when it gives up on Redis (``RedisUnavailableError``)."""

    engine: type[_E]
    """Makes a shard's engine (``Engine``, ``AsyncEngine``)."""

    def __init__(self, client: Any, ns: Namespace) -> None:
        self.client = client
        self.ns = ns
        self.engines: list[_E] = [self.engine(client, shard, ns.wait) for shard in ns.shards]
        """One engine per shard, in shard order."""
        self.home: _E = self.engines[0] if ns.count == 1 else self.engine(client, ns.home, ns.wait)
        """The engine on the namespace's own tag (its shard count)."""

    def _engines(self, step: OnShards) -> list[_E]:
        indexes = range(self.ns.count) if step.shards is None else step.shards
        return [self.engines[index] for index in indexes]

    def _outage(self, error: Exception) -> NoReturn:
        if isinstance(error, AuthenticationError):
            raise error  # wrong credentials are not an outage: retrying cannot help
        rediscover(self)
        if isinstance(error, RedisUnavailableError):
            raise error
        raise RedisUnavailableError(f"the book's Redis did not answer: {error}") from error


class Driver(_Drives[Engine]):
    """Runs namespace plans on a redis-py client (a Redis, a Cluster, Sentinel's master,
    fakeredis)."""

    outages = (RedisConnectionError, RedisTimeoutError, MovedError, ClusterDownError)

    engine = Engine

    def pool(self) -> ThreadPoolExecutor:
        """The threads that run several shards' writes at once."""
        return threads(min(8, self.ns.count), "asyncbook-shards", os.getpid())

    def run(self, plan: NamespaceCall[_T]) -> _T:
        """Run ``plan`` (after the namespace's shard count check); an outage raises
        ``RedisUnavailableError``."""
        try:
            if not self.ns.count_check.settled:
                self.home.run(self.ns.count_check.check())
            if isinstance(plan, OneShard):
                return self.engines[plan.index].run(plan.plan)
            return run(plan, self._step)
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
        return list(self.pool().map(lambda engine, plan: engine.run(plan), engines, step.plans))


class AsyncDriver(_Drives[AsyncEngine]):
    """Runs namespace plans on a ``redis.asyncio`` client (or Cluster client)."""

    engine = AsyncEngine

    async def run(self, plan: NamespaceCall[_T]) -> _T:
        """``Driver.run``, awaited."""
        try:
            if not self.ns.count_check.settled:
                await self.home.run(self.ns.count_check.check())
            if isinstance(plan, OneShard):
                return await self.engines[plan.index].run(plan.plan)
            return await run_async(plan, self._step)
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
