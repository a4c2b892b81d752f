"""``wait_replicas`` for the writes outside the book's own calls: the creates a
``CreateSender`` pipelines (a ``WAIT`` behind them, read with their answers; too few
replicas hand them back to be sent again) and a caller's script beside the book's events
(the Celery result backend's). On a loopback primary and replica of their own."""

from __future__ import annotations

import signal
import subprocess
import uuid
from collections.abc import Iterator

import pytest
import redis

from asyncbook import CreateSpec, NotReplicatedError, RedisBook
from asyncbook._book import ScriptedWrite
from asyncbook.redis._sender import _READ_AFTER

from ..support.cluster import require_binaries
from ..support.events import start
from ..support.servers import primary_and_replica

Pair = tuple[redis.Redis, redis.Redis, subprocess.Popen[bytes]]

ECHO = """
local answers = apply_events(KEYS, ARGV, 2)
if not answers then
  return {'!unknown'}
end
return {ARGV[1], redis.call('HGET', KEYS[1], 'st') or '', answers}
"""


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    """A primary and its replica, in sync (one pair for the module: it takes seconds)."""
    require_binaries()
    with primary_and_replica(tmp_path_factory.mktemp("pair")) as servers:
        yield servers


def book_on(
    primary: redis.Redis, replicas: int, timeout_ms: int = 2000, namespace: str | None = None
) -> RedisBook:
    port = primary.connection_pool.connection_kwargs["port"]
    return RedisBook.from_url(
        f"redis://127.0.0.1:{port}",
        namespace=namespace or f"c-{uuid.uuid4().hex[:10]}",
        wait_replicas=replicas,
        wait_timeout_ms=timeout_ms,
    )


def waits(primary: redis.Redis) -> int:
    """How many WAIT commands the primary has run."""
    stats = primary.info("commandstats")
    return int(stats.get("cmdstat_wait", {}).get("calls", 0))


def spec(task_id: str) -> CreateSpec:
    return CreateSpec(task_id, 0, 60_000, 1, exist_ok=True)


def test_sent_creates_are_on_the_replica_once_collected(pair: Pair) -> None:
    primary, replica, _ = pair
    book = book_on(primary, 1)
    sender = book.create_sender()
    assert sender is not None  # one shard: its creates are pipelined
    before = waits(primary)
    count = _READ_AFTER + 3  # one WAIT behind the first _READ_AFTER, one at collect
    for n in range(count):
        sender.send(spec(f"t{n}"))
    assert sender.pending()
    sender.collect()
    assert not sender.pending()
    assert sender.take_unanswered() == []
    assert waits(primary) == before + 2
    for n in range(count):
        assert replica.hget(book.keys.task(f"t{n}"), "st") == b"queued"
    sender.collect()  # nothing written since: no WAIT
    assert waits(primary) == before + 2
    sender.close()


def test_creates_no_replica_acknowledged_are_handed_back(pair: Pair) -> None:
    primary, _, replica_process = pair
    # Creates while the replica runs wait long enough for a busy machine (``patient``);
    # those while it is stopped, 200 ms.
    ready = book_on(primary, 1, timeout_ms=10_000)
    patient = ready.create_sender()
    assert patient is not None  # one shard: its creates are pipelined
    patient.send(spec("before"))
    patient.collect()
    assert patient.take_unanswered() == []
    book = book_on(primary, 1, timeout_ms=200, namespace=ready.keys.namespace)
    sender = book.create_sender()
    assert sender is not None  # one shard: its creates are pipelined
    replica_process.send_signal(signal.SIGSTOP)
    try:
        sender.send(spec("a"))
        sender.send(spec("b"))
        sender.collect()
    finally:
        replica_process.send_signal(signal.SIGCONT)
    assert not sender.pending()
    assert [lost.id for lost in sender.take_unanswered()] == ["a", "b"]
    # They ran on the primary: sent again (exist_ok), they are acknowledged this time.
    assert book.get("a") is not None
    patient.send(spec("a"))
    patient.send(spec("b"))
    patient.collect()
    assert patient.take_unanswered() == []
    sender.close()
    patient.close()


def test_a_sender_without_the_setting_sends_no_wait(pair: Pair) -> None:
    primary, _, _ = pair
    sender = book_on(primary, 0).create_sender()
    assert sender is not None  # one shard: its creates are pipelined
    before = waits(primary)
    for n in range(_READ_AFTER + 1):
        sender.send(spec(f"t{n}"))
    sender.collect()
    assert sender.take_unanswered() == []
    assert waits(primary) == before
    sender.close()


def test_a_script_beside_the_book_waits(pair: Pair) -> None:
    primary, replica, replica_process = pair
    # 10 s for replicas while the replica runs (a busy machine), 200 ms while it is stopped
    patient = book_on(primary, 1, timeout_ms=10_000)
    book = book_on(primary, 1, timeout_ms=200, namespace=patient.keys.namespace)
    patient.create(id="t", now_ms=0, ttl_ms=60_000, max_attempts=1)
    port = primary.connection_pool.connection_kwargs["port"]
    same = redis.Redis(host="127.0.0.1", port=port)  # the book's server, as it names it
    beside, stopped = patient.script_beside(same, ECHO), book.script_beside(same, ECHO)
    same.close()
    assert beside is not None
    assert stopped is not None
    before = waits(primary)
    answer = beside.apply(ScriptedWrite("t", [(start(1), "s")], "unused", ["echo"]))
    assert (answer.status, answer.state) == ("echo", "running")
    assert waits(primary) > before  # one, or two after NOSCRIPT (EVAL, WAIT again)
    assert replica.hget(book.keys.task("t"), "st") == b"running"
    replica_process.send_signal(signal.SIGSTOP)
    try:
        with pytest.raises(NotReplicatedError):
            stopped.apply(ScriptedWrite("t", [(start(1), "s")], "unused", ["echo"]))
    finally:
        replica_process.send_signal(signal.SIGCONT)
