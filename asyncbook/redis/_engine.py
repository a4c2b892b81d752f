"""The engines, one per shard of a book's namespace (its driver holds them): ``Engine``
runs the shard's plans on redis-py, ``AsyncEngine`` on ``redis.asyncio``, both through the
same steps (``_driver``); only how a step reaches Redis differs. A plan takes the
``Shard``, never its engine."""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster
from redis.exceptions import NoScriptError, ResponseError

from ._driver import Call, EngineBase, Step, script_texts, steps
from ._lane import lane_for
from ._pending import pending, settle
from ._plan import Command, Pipeline, Plan, Request, ScriptCall, Settle, run, run_async
from ._replicas import ReplicaWait
from ._shard import Shard

__all__ = ["AsyncEngine", "Engine"]

_T = TypeVar("_T")


class Engine(EngineBase):
    """A shard's engine on a redis-py client: runs the shard's plans; gives the client its
    pipelines go to."""

    def __init__(self, client: Any, shard: Shard, wait: ReplicaWait | None = None) -> None:
        super().__init__(client, shard, wait)
        self.lane = lane_for(self.client)
        """The script calls' way to a plain client's connections (``_lane``), or None."""

    def run(self, plan: Plan[_T]) -> _T:
        """Run one of the book's plans on the client."""
        return run(plan, self.execute)

    def execute(self, request: Request) -> Any:
        """One request of a plan, sent on the client."""
        if type(request) is ScriptCall and request.keys and not self.wait.replicas:
            # The common case, sent as ``_driver.steps`` sends it, without its steps.
            script = request.script or self.script(request.name)
            texts, count = script_texts(request), len(request.keys)
            if self.functions.on and script.function:
                try:
                    if self.lane is not None:
                        return self.lane.call(script.fcall, script.function, texts, count)
                    return getattr(self.client, script.fcall)(script.function, count, *texts)
                except ResponseError as error:
                    if not self.functions.missed(error):
                        raise
                    if self.functions.refusal(error) == "missing":
                        run(self.functions.load(script), self.send)
            try:
                if self.lane is not None:
                    return self.lane.call("evalsha", script.sha_bytes, texts, count)
                return self.client.evalsha(script.sha_bytes, count, *texts)
            except NoScriptError:  # not run: EVAL runs it and caches it again
                return self.client.eval(script.source, count, *texts)
        if isinstance(request, (Command, Pipeline)):
            return self.send(request)
        if isinstance(request, Settle):
            return settle(self.namespace)
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
        pipe = client.pipeline(transaction=step.transaction)
        for each in step.commands:
            getattr(pipe, each.name)(*each.args, **each.options)
        return pipe.execute(raise_on_error=not step.errors_as_replies)

    def slot_client(self) -> Any:
        """A client for pipelines: on a Cluster, the node owning the book's one slot.

        redis-py refuses EVALSHA in cluster pipelines; every key of a book shares one hash
        tag, so a plain pipeline on that node is exact.
        """
        if isinstance(self.client, RedisCluster):
            cluster: Any = self.client
            return cluster.get_node_from_key(self.keys.tag).redis_connection
        return self.client


class AsyncEngine(EngineBase):
    """A shard's engine on a ``redis.asyncio`` client."""

    async def run(self, plan: Plan[_T]) -> _T:
        return await run_async(plan, self.execute)

    async def execute(self, request: Request) -> Any:
        if isinstance(request, (Command, Pipeline)):
            return await self.send(request)
        if isinstance(request, Settle):
            if pending(self.namespace):  # a CreateSender of this process: a sync wait
                await asyncio.to_thread(settle, self.namespace)
            return None
        return await run_async(steps(self, request), self.send)

    async def send(self, step: Step) -> Any:
        """One step (``_driver``). A pipeline on a Cluster: a cluster pipeline, or its
        commands side by side on the book's node when some name no key."""
        if not isinstance(step, Pipeline):
            return await self.command(step.command if isinstance(step, Call) else step)
        if isinstance(self.client, AsyncRedisCluster):
            if any(each.name == "wait" for each in step.commands):
                raise TypeError("wait_replicas is not supported on an asyncio Cluster client")
            if not step.transaction and any(each.keyless for each in step.commands):
                # A cluster pipeline routes by key: these go to the book's node, side by side.
                replies = await asyncio.gather(
                    *(self.command(each) for each in step.commands), return_exceptions=True
                )
                for reply in replies:
                    if isinstance(reply, BaseException) and (
                        not step.errors_as_replies or not isinstance(reply, ResponseError)
                    ):
                        raise reply
                return replies
        async with self.client.pipeline(transaction=step.transaction) as pipe:
            for each in step.commands:
                getattr(pipe, each.name)(*each.args, **each.options)
            return await pipe.execute(raise_on_error=not step.errors_as_replies)

    async def command(self, request: Command) -> Any:
        """One command; on a Cluster, one that names no key goes to the book's node."""
        if request.keyless and isinstance(self.client, AsyncRedisCluster):
            await self.client.initialize()  # the slots known (at once once they are)
            node = self.client.get_node_from_key(self.keys.tag)
            words = (request.name.upper(), *request.args)
            return await self.client.execute_command(*words, target_nodes=node)
        return await getattr(self.client, request.name)(*request.args, **request.options)
