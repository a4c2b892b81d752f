"""``asyncbook_wait_replicas``: the integration's book waits for replicas, in every write
of a tracked task (the publisher's create, the result backend's script with the end), and
sends again what too few replicas acknowledged. A loopback primary and replica of their
own hold the book and Celery's results; an in-process worker on a memory broker."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from celery.contrib.testing.worker import start_worker

from asyncbook import AsyncBookError, RedisBook
from asyncbook.celery import install, uninstall
from asyncbook.celery._settings import Settings

from ..support.celery import MEMORY_BROKER, close_result_backend, unique, wait_for
from ..support.cluster import require_binaries
from ..support.servers import primary_and_replica

pytestmark = [
    pytest.mark.redis,
    pytest.mark.timeout(120),
    pytest.mark.filterwarnings("ignore:Call to deprecated setex:DeprecationWarning"),
]


def test_the_settings_are_read_and_checked() -> None:
    defaults = Settings.from_conf({})
    assert (defaults.wait_replicas, defaults.wait_timeout_ms) == (0, 1000)
    settings = Settings.from_conf({"asyncbook_wait_replicas": 1, "asyncbook_wait_timeout_ms": 50})
    assert (settings.wait_replicas, settings.wait_timeout_ms) == (1, 50)
    for name, value in [
        ("asyncbook_wait_replicas", -1),
        ("asyncbook_wait_replicas", True),
        ("asyncbook_wait_timeout_ms", 0),
        ("asyncbook_wait_timeout_ms", 1.5),
    ]:
        with pytest.raises(AsyncBookError, match=name) as refused:
            Settings.from_conf({name: value})
        assert refused.value.field == name


def waits(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return int(stats.get("cmdstat_wait", {}).get("calls", 0))


@pytest.fixture
def app(tmp_path: Path) -> Iterator[tuple[Celery, redis.Redis, redis.Redis, Any]]:
    require_binaries()
    with primary_and_replica(tmp_path) as (primary, replica, replica_process):
        port = primary.connection_pool.connection_kwargs["port"]
        app = Celery(
            unique("wait"),
            broker="memory://",
            backend=f"asyncbook+redis://127.0.0.1:{port}/0",
            set_as_current=False,
        )
        app.conf.update(
            {
                "task_default_queue": unique("q"),
                "broker_connection_retry_on_startup": True,
                **MEMORY_BROKER,
                "worker_hijack_root_logger": False,
                "result_backend_thread_safe": True,
                "asyncbook_namespace": unique("wait"),
                "asyncbook_flush_delay": 0.005,
                "asyncbook_wait_replicas": 1,
                "asyncbook_wait_timeout_ms": 200,
            }
        )

        @app.task(shared=False, tracked=True, ttl=60, name="w.double")
        def double(n: int) -> int:
            return 2 * n

        @app.task(shared=False, tracked=True, ttl=60, name="w.slow")
        def slow(n: int) -> int:
            time.sleep(0.3)  # ends while the replica is still stopped
            return 2 * n

        try:
            yield app, primary, replica, replica_process
        finally:
            close_result_backend(app)
            app.close()


def test_a_tracked_task_waits_for_the_replica(
    app: tuple[Celery, redis.Redis, redis.Redis, Any], caplog: pytest.LogCaptureFixture
) -> None:
    celery_app, primary, replica, replica_process = app
    integration = install(celery_app)
    book = integration.book
    try:
        assert isinstance(book, RedisBook)
        assert (book.engine.wait.replicas, book.engine.wait.timeout_ms) == (1, 200)
        with start_worker(celery_app, perform_ping_check=False, pool="threads", concurrency=2):
            before = waits(primary)
            result = celery_app.tasks["w.double"].delay(21)
            assert result.get(timeout=20) == 42
            assert waits(primary) > before
            # Celery's result is read on the primary: the end may still wait for its WAIT.
            wait_for(lambda: replica.hget(book.keys.task(result.id), "st") == b"succeeded")
            # No replica for a while: the create and the end are sent again until one
            # acknowledges them (each ran on the primary; callback ids make it safe).
            replica_process.send_signal(signal.SIGSTOP)
            resume = threading.Timer(1.0, replica_process.send_signal, (signal.SIGCONT,))
            resume.start()
            try:
                late = celery_app.tasks["w.slow"].delay(4)
                assert late.get(timeout=20) == 8
            finally:
                resume.join()
                replica_process.send_signal(signal.SIGCONT)
            integration.flush_creates()
            wait_for(lambda: replica.hget(book.keys.task(late.id), "st") == b"succeeded")
            task = book.get(late.id)
            assert task is not None
            assert [entry.event.type for entry in task.history] == ["start", "succeed"]
    finally:
        uninstall(celery_app)
        book.client.close()  # type: ignore[attr-defined]
    # Nothing was given up on: each write was sent again until the replica had it (the
    # worker logs at ERROR only; before, the create was given up on, logged).
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == []
