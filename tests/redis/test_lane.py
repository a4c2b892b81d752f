"""The script lane (``_lane``): a plain client's script calls straight on its pooled
connections, with the client's retry policy, its errors, and its connections given back."""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Iterator
from typing import Any

import fakeredis
import pytest
import redis
from redis.backoff import ConstantBackoff
from redis.retry import Retry

from asyncbook import RedisBook
from asyncbook.redis import _lane
from asyncbook.redis._lane import ScriptLane

from ..support.books import REDIS_URL

pytestmark = [
    pytest.mark.redis,
    pytest.mark.skipif(
        redis.VERSION < (5, 3), reason="no lane before redis-py 5.3 (get_connection() bare)"
    ),
]


def impatient_client(retries: int) -> redis.Redis:
    """A client of one connection (a leaked one would make the next call wait, then
    fail) that waits 0.1 s for an answer, and 0.5 s before a retry (the server is busy
    until then)."""
    pool = redis.BlockingConnectionPool.from_url(
        REDIS_URL,
        max_connections=1,
        timeout=2,
        socket_timeout=0.1,
        retry=Retry(ConstantBackoff(0.5), retries),
    )
    return redis.Redis(connection_pool=pool)


@pytest.fixture
def namespace() -> Iterator[str]:
    name = f"lane-{uuid.uuid4().hex}"
    yield name
    cleaner = redis.Redis.from_url(REDIS_URL)
    for key in cleaner.scan_iter(match=f"*{name}*"):
        cleaner.delete(key)
    cleaner.close()


SLOW_FIRST = """
if redis.call('incr', KEYS[1]) == 1 then
  local function now() local t = redis.call('time') return t[1] * 1e6 + t[2] end
  local stop = now() + 300000
  while now() < stop do end
end
return 'ok'
"""
"""Answers late the first time (0.3 s), at once after: each run counted."""


def test_a_plain_client_takes_the_lane_and_no_other_does() -> None:
    class Mine(redis.Redis):
        pass

    plain = redis.Redis.from_url(REDIS_URL)
    others: list[Any] = [
        redis.Redis.from_url(REDIS_URL, single_connection_client=True),
        Mine.from_url(REDIS_URL),
        fakeredis.FakeRedis(),
    ]
    assert isinstance(RedisBook(plain, namespace="lane").engine.lane, ScriptLane)
    for client in others:
        assert RedisBook(client, namespace="lane").engine.lane is None, client
    for client in (plain, *others):
        client.close()


def test_a_late_answer_is_retried_under_the_clients_policy(namespace: str) -> None:
    client = impatient_client(retries=1)
    book = RedisBook(client, namespace=namespace)
    slow_first = book.extra_script(SLOW_FIRST)
    client.script_load(SLOW_FIRST)  # EVALSHA finds it: the lane's call, not EVAL's
    counter = book.keys.task("runs")
    assert slow_first([counter], []) == b"ok"  # the second run's answer
    assert client.get(counter) == b"2"  # as redis-py's own dispatch would have run it
    assert book.get("t") is None  # the connection went back to the pool
    client.close()


def test_with_no_retries_a_late_answer_is_the_callers_error(namespace: str) -> None:
    client = impatient_client(retries=0)
    book = RedisBook(client, namespace=namespace)
    slow_first = book.extra_script(SLOW_FIRST)
    client.script_load(SLOW_FIRST)  # EVALSHA finds it: the lane's call, not EVAL's
    counter = book.keys.task("runs")
    with pytest.raises(redis.TimeoutError):
        slow_first([counter], [])
    time.sleep(0.5)  # the server is busy with the first run until then
    assert slow_first([counter], []) == b"ok"  # disconnected, given back, connected again
    assert client.get(counter) == b"2"
    client.close()


def test_script_errors_and_a_flushed_cache_answer_as_on_the_client(namespace: str) -> None:
    client = redis.Redis.from_url(REDIS_URL)
    book = RedisBook(client, namespace=namespace)
    boom = book.extra_script("return redis.error_reply('boom')")
    with pytest.raises(redis.ResponseError, match="boom"):
        boom([book.keys.task("t")], [])
    book.create(id="t", now_ms=0, ttl_ms=60_000, max_attempts=1)
    client.script_flush()
    client.function_flush()
    task = book.get("t")  # "Function not found", NOSCRIPT: the engine's EVAL ran it
    assert task is not None
    assert task.id == "t"
    assert book.get("t") == task  # by FCALL_RO: the library loaded again
    client.close()


def dispatched(client: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The commands redis-py's own dispatch parses answers of, from now on."""
    seen: list[str] = []
    parse: Any = client.parse_response

    def spy(connection: Any, command_name: str, **options: Any) -> Any:
        seen.append(command_name)
        return parse(connection, command_name, **options)

    monkeypatch.setattr(client, "parse_response", spy)
    return seen


def test_with_redis_py_observability_on_the_client_sends_it(
    namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """redis-py times every command it sends when OpenTelemetry is on: the lane then
    leaves the call to the client, so the book's calls are timed too."""
    client = redis.Redis.from_url(REDIS_URL)
    book = RedisBook(client, namespace=namespace)
    assert book.get("t") is None  # the script loaded
    seen = dispatched(client, monkeypatch)
    assert book.get("t") is None
    assert seen == []
    monkeypatch.setattr(_lane, "_observed", lambda: True)
    assert book.get("t") is None
    assert seen == ["FCALL_RO"]  # get.lua, in the book's library
    client.close()


def test_a_wrapped_dispatch_sees_every_call(
    namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An instrumentation (OpenTelemetry's, Sentry's, ddtrace's) wraps redis-py's
    ``execute_command`` on the class, at any time: from then on the book's calls go
    through it."""
    client = redis.Redis.from_url(REDIS_URL)
    book = RedisBook(client, namespace=namespace)
    assert book.get("t") is None
    traced: list[Any] = []
    execute: Any = redis.Redis.execute_command

    @functools.wraps(execute)
    def traced_execute(self: redis.Redis, *args: Any, **options: Any) -> Any:
        traced.append(args[0])
        return execute(self, *args, **options)

    monkeypatch.setattr(redis.Redis, "execute_command", traced_execute)
    assert book.get("t") is None
    assert traced == ["FCALL_RO"]  # get.lua, in the book's library
    monkeypatch.undo()
    assert book.get("t") is None
    assert traced == ["FCALL_RO"]
    client.close()


@pytest.mark.parametrize("encoding", ["utf-8", "latin-1"])
def test_a_call_is_packed_as_the_connection_packs_it(
    encoding: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # hiredis packs the whole call at once; the bytes are the connection's own, and a
    # client of another encoding keeps its own packing (it encodes text its way).
    connection: Any = redis.Redis(encoding=encoding).connection_pool.make_connection()
    parts = ("EVALSHA", b"ab" * 20, 2, "{ns}:t:é".encode(), b"k2", "text", 12)
    own = b"".join(connection.pack_command(*parts))
    assert b"".join(_lane.packed(connection, *parts)) == own
    calls: list[tuple[Any, ...]] = []

    def pack(parts: tuple[Any, ...]) -> bytes:
        calls.append(parts)
        return own

    monkeypatch.setattr(_lane, "_hiredis_pack", pack)
    _lane.packed(connection, *parts)
    hiredis_packs = type(connection._command_packer).__name__ == "HiredisRespSerializer"
    assert calls == ([parts] if hiredis_packs and encoding == "utf-8" else [])
