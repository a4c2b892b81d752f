"""``AsyncEngine``: the engine of one shard of an ``AsyncRedisBook`` (its asyncio driver,
``_async_book_driver``, holds one per shard), on a ``redis.asyncio`` client.

It runs the very plans ``Engine`` runs, through the same steps (``_driver``): only the
way a step reaches Redis differs (awaited; on a Cluster, keyless commands sent to the
node holding the book).
"""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.exceptions import ResponseError

from ._driver import Batch, Call, Step, batch_of, steps
from ._engine import EngineBase
from ._pending import pending, settle
from ._plan import Command, Pipeline, Plan, Request, Settle, run_async

__all__ = ["AsyncEngine"]

_T = TypeVar("_T")


class AsyncEngine(EngineBase):
    """A book's client, shard and scripts on ``redis.asyncio``: runs the book's plans."""

    asyncio = True

    async def run(self, plan: Plan[_T]) -> _T:
        """Run one of the book's plans on the client."""
        return await run_async(plan, self.execute)

    async def execute(self, request: Request) -> Any:
        """One request of a plan, sent on the client."""
        if isinstance(request, Command):
            return await self.command(request)
        if isinstance(request, Pipeline):
            return await self.batch(batch_of(request))
        if isinstance(request, Settle):
            if pending(self.namespace):  # a CreateSender of this process: a sync wait
                await asyncio.to_thread(settle, self.namespace)
            return None
        return await run_async(steps(self, request), self.send)

    async def send(self, step: Step) -> Any:
        """One step (``_driver``)."""
        if isinstance(step, Call):
            return await self.command(step.command)
        if isinstance(step, Command):
            return await self.command(step)
        return await self.batch(step)

    async def batch(self, step: Batch) -> Any:
        """Commands in one pipeline (on a Cluster, a cluster pipeline, or side by side on
        the book's node when some name no key)."""
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
                        step.raise_on_error or not isinstance(reply, ResponseError)
                    ):
                        raise reply
                return replies
        async with self.client.pipeline(transaction=step.transaction) as pipe:
            for each in step.commands:
                getattr(pipe, each.name)(*each.args, **each.options)
            return await pipe.execute(raise_on_error=step.raise_on_error)

    async def command(self, request: Command) -> Any:
        """One command; on a Cluster, one that names no key goes to the book's node."""
        if request.keyless and isinstance(self.client, AsyncRedisCluster):
            await self.client.initialize()  # the slots known (at once once they are)
            node = self.client.get_node_from_key(self.keys.tag)
            words = (request.name.upper(), *request.args)
            return await self.client.execute_command(*words, target_nodes=node)
        return await getattr(self.client, request.name)(*request.args, **request.options)
