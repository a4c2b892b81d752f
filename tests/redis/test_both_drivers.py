"""The batch plans (``_batches``, ``_expiries``, ``_outbox``) run by either driver: the
sync ``Engine`` and the asyncio ``AsyncEngine`` give equal answers on equal namespace
contents, with Redis' scripts flushed before each call (every script call meets
NOSCRIPT first), and with ``wait_replicas`` against a primary and its replica."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis
import redis.asyncio

from asyncbook import AsyncBookError, CreateSpec, RedisBook
from asyncbook.redis import _batches as batches
from asyncbook.redis import _expiries as expiries
from asyncbook.redis import _indexer as indexer
from asyncbook.redis import _outbox as outbox
from asyncbook.redis._driver import EngineBase
from asyncbook.redis._engine import AsyncEngine, Engine
from asyncbook.redis._keys import KeySchema
from asyncbook.redis._plan import Plan, ScriptCall
from asyncbook.redis._replicas import ReplicaWait
from asyncbook.redis._shard import Shard

from ..support.books import REDIS_URL, delete_namespace, redis_client
from ..support.cluster import require_binaries
from ..support.events import progress, start, succeed
from ..support.servers import primary_and_replica

_T = TypeVar("_T")

LATER = 4_000_000_000_000
"""A sweep's now past every stall (they are due by the server's clock)."""

STATE_OF = """
local st = redis.call('HGET', KEYS[1], 'st')
redis.call('SET', KEYS[2], st)
return {'seen', st}
"""


def _plain(value: Any) -> Any:
    """An answer made comparable: an error as its kind, code and field."""
    if isinstance(value, AsyncBookError):
        return ("error", type(value).__name__, value.code, value.field)
    if isinstance(value, Exception):
        return ("exception", type(value).__name__, str(value))
    if isinstance(value, list | tuple):
        return [_plain(each) for each in value]
    return value


def scenario(
    engine: EngineBase,
    run: Callable[[Plan[Any]], Any],
    client: redis.Redis,
    between: Callable[[str], None] = lambda _name: None,
) -> dict[str, Any]:
    """Each converted plan once, Redis' scripts flushed before each: their answers."""
    shard = engine.layout
    k = shard.keys
    answers: dict[str, Any] = {}

    def call(name: str, plan: Plan[_T]) -> _T:
        client.script_flush()
        answer: _T = run(plan)
        answers[name] = _plain(answer)
        between(name)
        return answer

    call(
        "create_many",
        batches.create_many(
            shard,
            [
                CreateSpec("a", 10, 100_000, 3),
                CreateSpec("b", 10, 100_000, 1, group_id="g"),
                CreateSpec("h", 10, 10**13, 2, heartbeat_timeout_ms=100, retry_on_stall=True),
                CreateSpec("old", 10, 100_000, 1),
                CreateSpec("a", 10, 100_000, 3),  # conflict
                CreateSpec("bad", 10, -1, 3),  # refused in Python
            ],
        ),
    )
    RedisBook(client, namespace=shard.namespace).seal_group("g", 1)  # b is its one member
    items: list[batches.ApplyBatchItem] = [
        ("a", start(20), "a:s"),
        ("b", start(20), "b:s"),
        ("h", start(20), "h:s"),
        ("old", start(20), "old:s"),
        ("old", succeed(30), "old:ok"),
        ("nobody", start(20), None),
    ]
    call("apply_many", batches.apply_many_then(shard, items, True, None))
    extra = engine.register(STATE_OF)
    then = ScriptCall(extra.name, [k.task("a"), f"{{{shard.namespace}}}:seen"], [], script=extra)
    call("apply_many_then", batches.apply_many_then(shard, [("a", progress(40), None)], True, then))
    call("end_stalled", batches.end_stalled(shard, LATER, 10))
    call("expire_many", expiries.expire_many(shard, ["b", "nobody", ""], True))
    lag = call("index", indexer.catch_up(shard, 2, 3))  # two batches of three, then the lag
    answers["index"] = lag.entries  # its age differs between two runs
    client.delete(k.task("old"))  # as if its retention had ended
    call("prune", batches.prune(shard, 100))
    reading = outbox.Reading(10, None, 60_000)
    read = call("consume", outbox.consume(shard, False, "mail", "c1", reading))
    answers["consume"] = [note for _entry, note in read]
    call("ack", outbox.ack(shard, False, "mail", tuple(entry for entry, _ in read[:2])))
    blocked = outbox.Reading(10, 50, 60_000)  # nothing new: a blocking read that waits
    call("consume_blocking", outbox.consume(shard, False, "mail", "c1", blocked))
    call("drain", outbox.drain(shard, False))
    groups = call("consume_groups", outbox.consume(shard, True, "gm", "c", reading))
    answers["consume_groups"] = [note for _entry, note in groups]
    call("ack_groups", outbox.ack(shard, True, "gm", tuple(entry for entry, _ in groups)))
    call("drain_groups", outbox.drain(shard, True))
    return answers


def both(
    sync_client: redis.Redis,
    async_client: Callable[[], Any],
    namespaces: tuple[str, str],
    wait: ReplicaWait,
    between: Callable[[str], None] = lambda _name: None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The scenario's answers by ``Engine`` on one namespace, by ``AsyncEngine`` on the
    other (its client used in one loop of its own)."""
    retention = timedelta(hours=1)
    engine = Engine(sync_client, Shard(namespaces[0], 8, retention), wait)
    by_sync = scenario(engine, engine.run, sync_client, between)
    loop = asyncio.new_event_loop()
    try:
        twin = AsyncEngine(async_client(), Shard(namespaces[1], 8, retention), wait)

        def run(plan: Plan[_T]) -> _T:
            return loop.run_until_complete(twin.run(plan))

        by_async = scenario(twin, run, sync_client, between)
        loop.run_until_complete(twin.client.aclose())
    finally:
        loop.close()
    return by_sync, by_async


@pytest.fixture
def namespaces(namespace: str) -> tuple[str, str]:
    return f"{namespace}-sync", f"{namespace}-async"


def test_both_drivers_answer_alike(namespaces: tuple[str, str]) -> None:
    client = redis_client()
    try:
        by_sync, by_async = both(
            client, lambda: redis.asyncio.Redis.from_url(REDIS_URL), namespaces, ReplicaWait()
        )
    finally:
        for each in namespaces:
            delete_namespace(client, each)
        client.close()
    assert by_sync == by_async
    assert [answer[1] for answer in by_sync["create_many"][4:]] == ["AsyncBookError"] * 2
    results, extra = by_sync["apply_many"]
    assert [r.reason for r in results[:5]] == ["started"] * 4 + ["succeeded"]
    assert (results[5][1], extra) == ("UnknownTaskError", None)
    assert by_sync["apply_many_then"][1] == [b"seen", b"running"]
    assert [(r.task.id, r.reason) for r in by_sync["end_stalled"]] == [("h", "requeued")]
    assert by_sync["expire_many"][0].reason == "expired"
    assert by_sync["index"] > 0  # the lag after two batches
    assert by_sync["prune"] > 0
    assert by_sync["ack"] == 2
    assert by_sync["consume_blocking"] == []
    assert {note.task_id for note in by_sync["drain"]} == {"b", "old"}
    assert [note.group_id for note in by_sync["consume_groups"]] == ["g"]
    assert by_sync["ack_groups"] == 1
    assert [note.group_id for note in by_sync["drain_groups"]] == ["g"]


def test_both_drivers_wait_for_the_replica(tmp_path: Path, namespaces: tuple[str, str]) -> None:
    require_binaries()
    with primary_and_replica(tmp_path) as (primary, replica, _process):
        port = primary.connection_pool.connection_kwargs["port"]
        url = f"redis://127.0.0.1:{port}"
        writes = {"create_many", "apply_many", "apply_many_then", "end_stalled"}
        writes |= {"expire_many", "index", "prune", "drain"}
        seen: list[tuple[str, int]] = [("", 0)]

        def between(name: str) -> None:
            """Note how many WAITs the primary ran once ``name`` returned."""
            stats = primary.info("commandstats")
            seen.append((name, int(stats.get("cmdstat_wait", {}).get("calls", 0))))

        by_sync, by_async = both(
            primary,
            lambda: redis.asyncio.Redis.from_url(url),
            namespaces,
            ReplicaWait(1, 5_000),
            between,
        )
        assert by_sync == by_async
        for (_before, count_before), (name, count) in itertools.pairwise(seen):
            if name in writes:
                assert count > count_before, name  # the write sent WAIT
            else:
                assert count == count_before, name  # a read, or the outbox's reads: none
        for each in namespaces:
            assert replica.hget(KeySchema(each, 0, 1).task("b"), "st") == b"expired"
            assert replica.get(f"{{{each}}}:seen") == b"running"
