"""The sync driver: runs a namespace's plans (``_merged``) on a redis-py client.

One ``Engine`` per shard sends a shard's requests (its script calls, commands and
pipelines, with NOSCRIPT and the replica wait). This driver answers a namespace plan's
steps: one shard's plan on its engine; reads of several shards together, one pipeline per
node (``run_together``); writes of several shards a thread each; ``Sleep``; the shard
count's check. It reports outages: redis-py giving up, or a Cluster node refusing the slot
(MOVED, CLUSTERDOWN), is ``RedisUnavailableError``, after the Cluster's slots are read
again so that the next call finds a promoted replica.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from redis.exceptions import AuthenticationError, ClusterDownError, MovedError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ._connection import RedisUnavailableError, rediscover
from ._engine import Engine
from ._merged import FixCount, MergedPlan, NamespaceCall, OneShard, OnShards, Sleep
from ._namespace import Namespace
from ._plan import run
from ._together import run_together

__all__ = ["Driver"]

_T = TypeVar("_T")


class Driver:
    """Runs namespace plans on a redis-py client (a Redis, a Cluster, Sentinel's master,
    fakeredis)."""

    def __init__(self, client: Any, ns: Namespace) -> None:
        self.client = client
        self.ns = ns
        self.engines = [Engine(client, shard, ns.wait) for shard in ns.shards]
        """One engine per shard, in shard order."""
        self.home = self.engines[0] if ns.count == 1 else Engine(client, ns.home, ns.wait)
        """The engine on the namespace's own tag (its shard count)."""
        self._pool: ThreadPoolExecutor | None = None
        self._pool_pid = 0
        self._pool_lock = threading.Lock()

    def run(self, plan: NamespaceCall[_T]) -> _T:
        """Run ``plan`` (after the namespace's shard count check); an outage raises
        ``RedisUnavailableError``."""
        try:
            if not self.ns.count_check.settled:
                self.home.run(self.ns.count_check.check())
            if type(plan) is OneShard:
                return self.engines[plan.index].run(plan.plan)
            assert not isinstance(plan, OneShard)
            return self._drive(plan)
        except AuthenticationError:
            raise  # wrong credentials are not an outage: retrying cannot help
        except (RedisConnectionError, RedisTimeoutError, MovedError, ClusterDownError) as error:
            rediscover(self)
            if isinstance(error, RedisUnavailableError):
                raise
            raise RedisUnavailableError(f"the book's Redis did not answer: {error}") from error

    def _drive(self, plan: MergedPlan[_T]) -> _T:
        return run(plan, self._step)

    def _step(self, step: OnShards | Sleep | FixCount) -> Any:
        """One step of a namespace plan: its answer (an error is thrown into the plan)."""
        if type(step) is OnShards and len(step.plans) == 1:  # one shard's plan: most calls
            return [self.engines[step.shards[0] if step.shards else 0].run(step.plans[0])]
        if isinstance(step, Sleep):
            return time.sleep(step.seconds)
        if isinstance(step, FixCount):
            return self.home.run(self.ns.count_check.fix())
        return self._on_shards(step)

    def _on_shards(self, step: OnShards) -> list[Any]:
        indexes = range(self.ns.count) if step.shards is None else step.shards
        engines = [self.engines[index] for index in indexes]
        if len(step.plans) == 1:
            return [engines[0].run(step.plans[0])]
        if not step.writes:
            return run_together(engines, step.plans)
        pairs = list(zip(engines, step.plans, strict=True))
        return list(self.pool().map(lambda pair: pair[0].run(pair[1]), pairs))

    def pool(self) -> ThreadPoolExecutor:
        """The threads that run several shards' writes at once (per process: a fork
        starts its own)."""
        with self._pool_lock:
            if self._pool is None or self._pool_pid != os.getpid():
                self._pool = ThreadPoolExecutor(
                    max_workers=min(8, self.ns.count), thread_name_prefix="asyncbook-shards"
                )
                self._pool_pid = os.getpid()
            return self._pool

    def node_of(self, index: int) -> str:
        """``host:port`` (or the socket's path) of the node holding shard ``index``."""
        kwargs = self.engines[index].slot_client().connection_pool.connection_kwargs
        return f"{kwargs.get('host') or kwargs.get('path')}:{kwargs.get('port', '')}"

    def shard_map(self) -> dict[str, list[int]]:
        """Which node holds which shards: ``host:port`` -> shard indexes."""
        nodes: dict[str, list[int]] = {}
        for index in range(self.ns.count):
            nodes.setdefault(self.node_of(index), []).append(index)
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
