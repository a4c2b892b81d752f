"""The engine under a Redis book: its client, key schema and scripts, and the calls
built from them.

``RedisBook`` and ``AsyncRedisBook`` each hold one engine and delegate to it; the
modules split out of the book (``_batches``, ``_outbox``, ``_sender``) take the engine,
never the book. The plans (``_operations``, ``_console``) are built from the engine's
layout and run by the engine (``Engine.run``, ``AsyncEngine.run``). ``EngineBase`` is
what both engines share (the client, the layout with its key schema and retention, the
scripts registered on that client); ``Engine`` runs on redis-py, ``AsyncEngine``
(``_async_engine``) on ``redis.asyncio``.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, TypeVar

from redis.cluster import RedisCluster

from .._book import CreateSpec
from .._checks import require_heartbeat_timeout, require_text
from .._machine import create_async_task
from .._models import AsyncTask
from . import _operations as operations
from ._args import dumps, number_text, utf8
from ._facts import TaskFacts
from ._pending import settle
from ._plan import Command, Plan, Request, ScriptCall, Settle, run
from ._publish_fields import kept_message_of, publish_fields
from ._replicas import ReplicaWait
from ._script_args import ApplyArgs, CreateArgs
from ._scripts import BookScript, BookScripts, with_helpers
from ._shard import Shard

__all__ = ["CreateCall", "Engine", "EngineBase"]

_T = TypeVar("_T")

CreateCall = tuple[AsyncTask, list[str], list[str]]
"""The task create.lua would store, and the script's KEYS and ARGV."""


class EngineBase:
    """A book's client, its layout (namespace, key schema, retention, what it learned of
    its tasks) and the scripts registered on that client."""

    asyncio: ClassVar[bool] = False
    """True for an engine on a ``redis.asyncio`` client."""

    def __init__(self, client: Any, shard: Shard, wait: ReplicaWait | None = None) -> None:
        self.client = client
        self.wait = wait or ReplicaWait()
        """How many replicas a write waits for (``wait_replicas``)."""
        self.layout = shard
        self.keys = shard.keys
        self.namespace = shard.namespace
        self.scripts = BookScripts.register(client, self.wait, self.script_node)
        self.stream_groups = shard.stream_groups
        """(stream, consumer group) pairs known to exist (``_outbox``)."""
        self.prune_from = shard.prune_from
        """Where the next prune resumes, per index (``_batches.prune``)."""

    def script_node(self) -> Any:
        """The client a script's pipeline with WAIT goes to (``Engine``: the slot's node)."""
        return self.client

    def script(self, name: str) -> BookScript:
        """The book's script ``name`` (a ``BookScripts`` field)."""
        script: BookScript = getattr(self.scripts, name)
        return script

    def create_call(self, spec: CreateSpec) -> CreateCall:
        """The task create.lua would store, and the script's KEYS and ARGV."""
        task, keys, args = self.create_args(spec)
        return task, keys, args.argv()

    def create_args(self, spec: CreateSpec) -> tuple[AsyncTask, list[str], CreateArgs]:
        """The task create.lua would store, the script's KEYS and its ARGV record."""
        id = spec.id
        group = None
        if spec.group_id is not None:
            group = utf8(require_text(spec.group_id, "groupId"), "groupId")
        task = create_async_task(
            id=id, now_ms=spec.now_ms, ttl_ms=spec.ttl_ms, max_attempts=spec.max_attempts
        )
        timeout = require_heartbeat_timeout(spec.heartbeat_timeout_ms)
        k = self.keys
        keys = [
            k.task(id),
            k.history(id),
            k.state_index("queued"),
            k.deadlines,
            k.sequence,
            k.group(group or ""),
            k.group_members(group or ""),
        ]
        published = publish_fields(spec.info)
        message = kept_message_of(spec.info)
        name, parent = published.get("name", ""), published.get("parent_id", "")
        keys += [k.info(id), k.names, k.name_index("queued", name), k.children(parent)]
        keys.append(k.message(id))
        group_json = "" if group is None else dumps(group, "groupId")
        deadline = number_text(task.expires_at_ms)
        self.layout.facts.learn(id, TaskFacts(name, group_json, "", deadline))
        args = CreateArgs(
            task_id=id,
            task_id_json=dumps(id, "id"),
            deadline=deadline,
            max_attempts=task.max_attempts,
            exist_ok=spec.exist_ok,
            changes_channel=k.changes_channel,
            heartbeat_timeout_ms=timeout,
            retry_on_stall=bool(spec.retry_on_stall),
            group_id_json=group_json,
            created_ms=number_text(spec.now_ms),
            children_keep_ms=self.children_keep_ms(spec),
            message=message,
            message_keep_ms=self.life_and_retention_ms(spec) if message else "",
            **published,
        )
        return task, keys, args

    def children_keep_ms(self, spec: CreateSpec) -> str:
        """How long a parent's list of children is kept: the child's life and retention."""
        if spec.info is None or spec.info.parent_id is None:
            return ""
        return self.life_and_retention_ms(spec)

    def life_and_retention_ms(self, spec: CreateSpec) -> str:
        """The longest a task's record can live: its ttl and the retention; '' for ever."""
        if not self.layout.retention_ms:
            return ""
        return str(int(self.layout.retention_ms) + max(0, math.ceil(float(spec.ttl_ms))))


class Engine(EngineBase):
    """The engine of a ``RedisBook``, on a redis-py client: runs the book's plans, gives
    the client its pipelines go to, registers the caller's own scripts."""

    def run(self, plan: Plan[_T]) -> _T:
        """Run one of the book's plans (``_operations``, ``_console``) on the client."""
        return run(plan, self.execute)

    def execute(self, request: Request) -> Any:
        """One request of a plan, sent on the client."""
        if isinstance(request, ScriptCall):
            script = request.script or self.script(request.name)
            return script(request.keys, request.args)
        if isinstance(request, Settle):
            return self.settle()
        client = self.slot_client()
        if isinstance(request, Command):
            return getattr(client, request.name)(*request.args, **request.options)
        pipe = client.pipeline(transaction=False)
        for each in request.commands:
            getattr(pipe, each.name)(*each.args, **each.options)
        return pipe.execute(raise_on_error=not request.errors_as_replies)

    def settle(self) -> None:
        """Wait for the creates this process wrote to the book and has no answer for yet
        (read-your-writes for a publisher whose creates do not wait)."""
        settle(self.namespace)

    def before_write(self) -> None:
        """What runs before the book's first write: the server check (``check_server``)."""
        self.run(operations.before_write(self.layout))

    def apply_one(self, keys: list[str], args: ApplyArgs) -> Any:
        """apply.lua's reply to one call, with the task's info block."""
        return self.run(operations.apply_one(self.layout, keys, args))

    def script_node(self) -> Any:
        """The slot client (``slot_client``)."""
        return self.slot_client()

    def slot_client(self) -> Any:
        """A client for pipelines: on a Cluster, the node owning the book's one slot.

        redis-py refuses EVALSHA in cluster pipelines; every key of a book shares one hash
        tag, so a plain pipeline on that node is exact.
        """
        if isinstance(self.client, RedisCluster):
            cluster: Any = self.client
            return cluster.get_node_from_key(self.keys.tag).redis_connection
        return self.client

    def register(self, source: str) -> BookScript:
        """A script of the caller's, registered on the slot client (no round trip until
        first use)."""
        client = self.slot_client()
        return BookScript(client.register_script(source), client, self.wait, self.slot_client)

    def register_with_helpers(self, source: str) -> BookScript:
        """``register`` of ``source`` with the task helpers and ``apply_event`` in front."""
        return self.register(with_helpers(source))
