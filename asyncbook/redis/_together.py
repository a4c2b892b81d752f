"""Running one plan per shard together: each step's requests of every plan go out in one
pipeline per Redis node, the nodes' pipelines at once (a thread each), so a read over S
shards costs the round trips of one plan, not S times them.

A plan's request meets what it would meet run alone (``Engine.execute``): a reply, or an
error thrown into the plan. The driver says which commands send a request among others
and reads their replies (``_driver.queued``, ``answered``: a script Redis lost is sent
again on its own); a request that goes alone (``SETTLE``, script calls together, a
transaction) is run by its engine.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from ._driver import answered, queued
from ._engine import Engine
from ._plan import Command, Plan, advance

__all__ = ["Threads", "run_together"]

_T = TypeVar("_T")


class _Running:
    """One plan being run: its engine, the request it waits on, or its answer."""

    def __init__(self, engine: Engine, plan: Plan[Any]) -> None:
        self.engine = engine
        self.plan = plan
        self.commands: list[Command] = []
        """The commands that send ``step`` in its node's pipeline."""
        self.advance(None, None)

    def advance(self, reply: Any, error: Exception | None) -> None:
        self.done, self.step = advance(self.plan, reply, error)


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
            commands = queued(each.engine, each.step)
            if commands is None:
                try:
                    reply, error = each.engine.execute(each.step), None
                except Exception as failed:
                    reply, error = None, failed
                each.advance(reply, error)
                continue
            each.commands = commands
            client = each.engine.slot_client()
            by_node.setdefault(id(client), (client, []))[1].append(each)
        nodes = list(by_node.values())
        sent = _NODES().map(_send, nodes) if len(nodes) > 1 else map(_send, nodes)
        for (_client, group), (counts, replies, met) in zip(nodes, list(sent), strict=True):
            if met is not None:  # a lost connection: every plan of the node meets it
                for each in group:
                    each.advance(None, met)
                continue
            at = 0
            for each, count in zip(group, counts, strict=True):
                reply, error = answered(each.engine, each.step, replies[at : at + count])
                at += count
                each.advance(reply, error)


def _send(node: tuple[Any, list[_Running]]) -> tuple[list[int], list[Any], Exception | None]:
    """One node's pipeline of its plans' requests: how many commands each added, the
    replies, or the error the pipeline met."""
    client, group = node
    pipe = client.pipeline(transaction=False)
    counts = []
    for each in group:
        for command in each.commands:
            getattr(pipe, command.name)(*command.args, **command.options)
        counts.append(len(each.commands))
    try:
        return counts, pipe.execute(raise_on_error=False), None
    except Exception as met:
        return counts, [], met


class Threads:
    """A pool of threads to run calls at once, per process (a fork starts its own)."""

    def __init__(self, size: int, name: str) -> None:
        self.size = size
        self.name = name
        self._pool: tuple[int, ThreadPoolExecutor] | None = None
        self._lock = threading.Lock()

    def __call__(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None or self._pool[0] != os.getpid():
                self._pool = (
                    os.getpid(),
                    ThreadPoolExecutor(self.size, thread_name_prefix=self.name),
                )
            return self._pool[1]


_NODES = Threads(8, "asyncbook-nodes")
"""The threads that send several nodes' pipelines at once."""
