"""A Cluster failover under a book with ``wait_replicas=1``: every write the book
acknowledged before its slot's master was killed is in the book after the replica's
promotion, and the book writes again once its slot has a replica. On a local cluster of
three masters with a replica each, a short node timeout."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from asyncbook import AsyncBookError, CreateSpec, RedisBook
from asyncbook.redis import retry_policy

from ..support.cluster import local_cluster, require_binaries
from ..support.events import start, succeed
from ..support.servers import wait_until

_T = TypeVar("_T")


def eventually(call: Callable[[], _T], seconds: float = 30.0) -> _T:
    """``call()``, tried again while the book refuses it as unavailable (an outage, or
    too few replicas), for at most ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return call()
        except AsyncBookError as error:
            if error.code != "unavailable" or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@pytest.mark.long
def test_acknowledged_writes_survive_a_failover(tmp_path: Path) -> None:
    require_binaries()
    with local_cluster(tmp_path, replicas=1, node_timeout_ms=1000) as cluster:
        book = RedisBook.from_url(
            f"redis+cluster://127.0.0.1:{cluster[0]}",
            namespace="failover",
            wait_replicas=1,
            wait_timeout_ms=500,
            retry=retry_policy(0),
            socket_timeout=1,
            socket_connect_timeout=1,
        )
        expected: dict[str, str] = {}
        for n in range(30):
            task_id = f"t{n}"
            book.create(id=task_id, now_ms=0, ttl_ms=600_000, max_attempts=1)
            expected[task_id] = "queued"
            if n % 3:
                book.apply(task_id, start(1), callback_id=f"{task_id}:start")
                expected[task_id] = "running"
            if n % 3 == 2:
                book.apply_many([(task_id, succeed(2), f"{task_id}:succeed")])
                expected[task_id] = "succeeded"
        owner = cluster.owner(book.keys.tag)
        cluster.processes[owner].send_signal(signal.SIGKILL)
        # Its replica takes the slot; the book writes again once the slot has a replica
        # (the killed master, back). Writes first: they go straight to the slot's node,
        # and must find the new one themselves (a read through the cluster client would
        # have shown it to them).
        wait_until(lambda: cluster.owner(book.keys.tag) != owner, 30, "failover")
        assert cluster.owner(book.keys.tag) in cluster.replica_of[owner]
        cluster.restart(owner)
        eventually(lambda: book.create_many([CreateSpec("after", 0, 600_000, 1, exist_ok=True)]))
        for task_id, state in expected.items():
            task = book.get(task_id)
            assert task is not None, task_id
            assert task.state.value == state, task_id
        # The pipelines go to the new master too.
        eventually(lambda: book.apply_many([("after", start(3), "after:start")]))
        task = book.get("after")
        assert task is not None
        assert task.state.value == "running"
        book.client.close()
