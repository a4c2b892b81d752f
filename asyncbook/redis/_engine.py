"""The engine of one shard: its client, shard and scripts, and the sync engine that runs
the shard's plans on redis-py.

A book's driver (``_book_driver``, ``_async_book_driver``) holds one engine per shard of
its namespace and hands each shard's plan to its engine. The shard plans
(``_operations``, ``_console``, ``_batches``, ``_expiries``, ``_outbox``) take the
shard (``Shard``), never the engine, and each engine runs them (``Engine.run``,
``AsyncEngine.run``): the engines, with ``_driver``, are the only code that knows
NOSCRIPT, WAIT for replicas and the node of a Cluster's slot. ``EngineBase`` is what
both engines share (the client, the shard, the scripts); ``Engine`` runs on redis-py,
``AsyncEngine`` (``_async_engine``) on ``redis.asyncio``.
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

from redis.cluster import RedisCluster
from redis.exceptions import NoScriptError

from .._book import CreateSpec
from .._models import AsyncTask
from ._creating import create_args
from ._driver import Batch, Call, Step, batch_of, steps
from ._pending import settle
from ._plan import Command, Pipeline, Plan, Request, ScriptCall, Settle, run
from ._replicas import ReplicaWait
from ._scripts import BookScript, BookScripts
from ._shard import Shard

__all__ = ["Engine", "EngineBase"]

_T = TypeVar("_T")


class EngineBase:
    """A book's client, its shard (namespace, key schema, retention, what it learned of
    its tasks) and the scripts, called through this engine."""

    asyncio: ClassVar[bool] = False
    """True for an engine on a ``redis.asyncio`` client."""

    def __init__(self, client: Any, shard: Shard, wait: ReplicaWait | None = None) -> None:
        self.client = client
        self.wait = wait or ReplicaWait()
        """How many replicas a write waits for (``wait_replicas``)."""
        self.layout = shard
        self.keys = shard.keys
        self.namespace = shard.namespace
        self.scripts = BookScripts.register(self.execute)

    def execute(self, request: Request) -> Any:
        """One request of a plan, sent on the client (``Engine``, ``AsyncEngine``)."""
        raise NotImplementedError

    def script(self, name: str) -> BookScript:
        """The book's script ``name`` (a ``BookScripts`` field)."""
        script: BookScript = getattr(self.scripts, name)
        return script

    def register(self, source: str) -> BookScript:
        """A script of the caller's, called through this engine (no round trip until
        first use)."""
        return BookScript(source, "", self.execute)

    def create_call(self, spec: CreateSpec) -> tuple[AsyncTask, list[str], list[str]]:
        """The task create.lua would store, and the script's KEYS and ARGV."""
        task, keys, args = create_args(self.layout, spec)
        return task, keys, args.argv()


class Engine(EngineBase):
    """A shard's engine on a redis-py client: runs the shard's plans; gives the client its
    pipelines go to."""

    def run(self, plan: Plan[_T]) -> _T:
        """Run one of the book's plans on the client."""
        return run(plan, self.execute)

    def execute(self, request: Request) -> Any:
        """One request of a plan, sent on the client."""
        if type(request) is ScriptCall and request.keys and not self.wait.replicas:
            # The common case, sent as ``_driver.unwaited`` sends it, without its steps.
            script = request.script or self.script(request.name)
            keys = request.keys
            try:
                return self.client.evalsha(script.sha, len(keys), *keys, *request.args)
            except NoScriptError:  # not run: EVAL runs it and caches it again
                return self.client.eval(script.source, len(keys), *keys, *request.args)
        if isinstance(request, Command):
            return self.send(request)
        if isinstance(request, Pipeline):
            return self.send(batch_of(request))
        if isinstance(request, Settle):
            return self.settle()
        return run(steps(self, request), self.send)

    def send(self, step: Step) -> Any:
        """One step (``_driver``): a script call on the client (a Cluster client routes
        it), a command or a pipeline on the node of the book's slot."""
        if isinstance(step, Call):
            name, args = step.command.name, step.command.args
            return getattr(self.client, name)(*args, **step.command.options)
        client = self.slot_client()
        if isinstance(step, Command):
            return getattr(client, step.name)(*step.args, **step.options)
        assert isinstance(step, Batch)
        pipe = client.pipeline(transaction=step.transaction)
        for each in step.commands:
            getattr(pipe, each.name)(*each.args, **each.options)
        return pipe.execute(raise_on_error=step.raise_on_error)

    def settle(self) -> None:
        """Wait for the creates this process wrote to the book and has no answer for yet
        (read-your-writes for a publisher whose creates do not wait)."""
        settle(self.namespace)

    def slot_client(self) -> Any:
        """A client for pipelines: on a Cluster, the node owning the book's one slot.

        redis-py refuses EVALSHA in cluster pipelines; every key of a book shares one hash
        tag, so a plain pipeline on that node is exact.
        """
        if isinstance(self.client, RedisCluster):
            cluster: Any = self.client
            return cluster.get_node_from_key(self.keys.tag).redis_connection
        return self.client
