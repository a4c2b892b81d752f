"""Running one plan per shard together: each step's requests of every plan go out in one
pipeline per Redis node, the nodes' pipelines at once (a thread each), so a read over S
shards costs the round trips of one plan, not S times them.

A plan's request meets what it would meet run alone (``Engine.execute``): a reply, or an
error thrown into the plan. A script Redis lost (NOSCRIPT) is sent again on its own.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from redis.exceptions import NoScriptError, ResponseError

from ._engine import Engine
from ._plan import Command, Pipeline, Plan, Request, ScriptCall, Settle

__all__ = ["run_together"]

_T = TypeVar("_T")


class _Running:
    """One plan being run: its engine, the request it waits on, or its answer."""

    def __init__(self, engine: Engine, plan: Plan[Any]) -> None:
        self.engine = engine
        self.plan = plan
        self.done = False
        self.step: Any = None
        self.advance(None, None)

    def advance(self, reply: Any, error: Exception | None) -> None:
        try:
            self.step = self.plan.send(reply) if error is None else self.plan.throw(error)
        except StopIteration as stop:
            self.done, self.step = True, stop.value


def _queue(pipe: Any, engine: Engine, request: Request) -> int:
    """Add a request's commands to ``pipe``; returns how many it added."""
    if isinstance(request, ScriptCall):
        script = request.script or engine.script(request.name)
        pipe.evalsha(script.sha, len(request.keys), *request.keys, *request.args)
        return 1
    if isinstance(request, Command):
        getattr(pipe, request.name)(*request.args, **request.options)
        return 1
    assert isinstance(request, Pipeline)
    for each in request.commands:
        getattr(pipe, each.name)(*each.args, **each.options)
    return len(request.commands)


def _answer(engine: Engine, request: Request, replies: list[Any]) -> tuple[Any, Exception | None]:
    """What ``request`` met, from its replies in the pipeline."""
    if isinstance(request, Pipeline):
        errors = [r for r in replies if isinstance(r, ResponseError)]
        if errors and not request.errors_as_replies:
            return None, errors[0]
        return replies, None
    reply = replies[0]
    if isinstance(reply, NoScriptError):
        try:
            return engine.execute(request), None
        except Exception as met:  # thrown into the plan, as run alone
            return None, met
    if isinstance(reply, ResponseError):
        return None, reply
    return reply, None


def run_together(engines: Sequence[Engine], plans: Sequence[Plan[_T]]) -> list[_T]:
    """Run ``plans[i]`` on ``engines[i]``, all in lock step; their answers, in order.
    Meant for reads: a writing script's replica wait is not sent here."""
    running = [_Running(engine, plan) for engine, plan in zip(engines, plans, strict=True)]
    while True:
        waiting = [each for each in running if not each.done]
        if not waiting:
            return [each.step for each in running]
        by_node: dict[int, tuple[Any, list[_Running]]] = {}
        for each in waiting:
            if isinstance(each.step, Settle):
                each.engine.settle()
                each.advance(None, None)
                continue
            client = each.engine.slot_client()
            by_node.setdefault(id(client), (client, []))[1].append(each)
        nodes = list(by_node.values())
        sent = _pool().map(_send, nodes) if len(nodes) > 1 else map(_send, nodes)
        for (_client, group), (counts, replies, met) in zip(nodes, list(sent), strict=True):
            if met is not None:  # a lost connection: every plan of the node meets it
                for each in group:
                    each.advance(None, met)
                continue
            at = 0
            for each, count in zip(group, counts, strict=True):
                reply, error = _answer(each.engine, each.step, replies[at : at + count])
                at += count
                each.advance(reply, error)


def _send(node: tuple[Any, list[_Running]]) -> tuple[list[int], list[Any], Exception | None]:
    """One node's pipeline of its plans' requests: how many commands each added, the
    replies, or the error the pipeline met."""
    client, group = node
    pipe = client.pipeline(transaction=False)
    counts = [_queue(pipe, each.engine, each.step) for each in group]
    try:
        return counts, pipe.execute(raise_on_error=False), None
    except Exception as met:
        return counts, [], met


_POOL: tuple[int, ThreadPoolExecutor] | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    """The threads that send several nodes' pipelines at once (per process: a fork
    starts its own)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL[0] != os.getpid():
            _POOL = (os.getpid(), ThreadPoolExecutor(8, thread_name_prefix="asyncbook-nodes"))
        return _POOL[1]
