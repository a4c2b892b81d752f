"""``AsyncEngine``: the engine of an ``AsyncRedisBook``, on a ``redis.asyncio`` client.

It runs the very plans ``Engine`` runs (``_operations``, ``_console``): only the way a
request reaches Redis differs (awaited; on a Cluster, keyless commands sent to the node
holding the book).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, TypeVar

from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.exceptions import NoScriptError, ResponseError

from ._engine import EngineBase
from ._pending import pending, settle
from ._plan import Command, Plan, Request, ScriptCall, Settle, run_async

__all__ = ["AsyncEngine"]

_T = TypeVar("_T")


class AsyncEngine(EngineBase):
    """A book's client, layout and scripts on ``redis.asyncio``: runs the book's plans."""

    asyncio = True

    async def run(self, plan: Plan[_T]) -> _T:
        """Run one of the book's plans on the client."""
        return await run_async(plan, self.execute)

    async def execute(self, request: Request) -> Any:
        """One request of a plan, sent on the client."""
        if isinstance(request, ScriptCall):
            script = request.script or self.script(request.name)
            keys, args = request.keys, request.args
            if self.wait.waits_after(request.name):
                return await self.waited(script.sha, script.source, keys, args)
            try:
                return await self.client.evalsha(script.sha, len(keys), *keys, *args)
            except NoScriptError:  # not run: EVAL runs it and caches it again
                return await self.client.eval(script.source, len(keys), *keys, *args)
        if isinstance(request, Settle):
            if pending(self.namespace):  # a CreateSender of this process: a sync wait
                await asyncio.to_thread(settle, self.namespace)
            return None
        if isinstance(request, Command):
            return await self.command(request)
        if isinstance(self.client, AsyncRedisCluster) and any(
            each.keyless for each in request.commands
        ):
            # A cluster pipeline routes by key: these go to the book's node, side by side.
            replies = await asyncio.gather(
                *(self.command(each) for each in request.commands), return_exceptions=True
            )
            for reply in replies:
                if isinstance(reply, BaseException) and not (
                    request.errors_as_replies and isinstance(reply, ResponseError)
                ):
                    raise reply
            return replies
        async with self.client.pipeline(transaction=False) as pipe:
            for each in request.commands:
                getattr(pipe, each.name)(*each.args, **each.options)
            return await pipe.execute(raise_on_error=not request.errors_as_replies)

    async def waited(self, sha: str, source: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """The script's reply, sent with ``WAIT`` behind it in one pipeline (one connection);
        ``NotReplicatedError`` if too few replicas acknowledged it."""
        if isinstance(self.client, AsyncRedisCluster):
            raise TypeError("wait_replicas is not supported on an asyncio Cluster client")
        for use_source in (False, True):  # NOSCRIPT: nothing ran, EVAL it again
            async with self.client.pipeline(transaction=False) as pipe:
                if use_source:
                    pipe.eval(source, len(keys), *keys, *args)
                else:
                    pipe.evalsha(sha, len(keys), *keys, *args)
                pipe.wait(self.wait.replicas, self.wait.timeout_ms)
                reply, acknowledged = await pipe.execute(raise_on_error=False)
            if not isinstance(reply, NoScriptError):
                break
        if isinstance(reply, Exception):
            raise reply
        self.wait.check(acknowledged)
        return reply

    async def command(self, request: Command) -> Any:
        """One command; on a Cluster, one that names no key goes to the book's node."""
        if request.keyless and isinstance(self.client, AsyncRedisCluster):
            await self.client.initialize()  # the slots known (at once once they are)
            node = self.client.get_node_from_key(self.keys.tag)
            words = (request.name.upper(), *request.args)
            return await self.client.execute_command(*words, target_nodes=node)
        return await getattr(self.client, request.name)(*request.args, **request.options)
