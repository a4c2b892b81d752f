"""A Redis server of its own for each test process under pytest-xdist (``make test`` runs
two): some tests act on the whole server (``CLIENT PAUSE``, ``SCRIPT FLUSH``, killing
every pub/sub client, removing every ``celery-task-meta-*`` of the Celery db), which a
test running in the other process would see. Each process starts a loopback
``redis-server`` (nothing on disk) and points the test URLs at it, before any test module
reads them; it is stopped by PID when the process ends. Run in one process, the tests use
the shared Redis on 127.0.0.1:6379 as before."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from contextlib import ExitStack
from functools import partial
from pathlib import Path

import redis

from .servers import free_port, redis_server, wait_until

__all__ = ["TEST_URLS", "start_for_this_process", "stop"]

TEST_URLS = {
    "ASYNCBOOK_TEST_REDIS_URL": 10,
    "ASYNCBOOK_CELERY_TEST_REDIS_URL": 12,
    "ASYNCBOOK_DEMO_TEST_REDIS_URL": 13,
    "ASYNCBOOK_TEST_WEB_REDIS_URL": 14,
    "ASYNCBOOK_TEST_CLI_REDIS_URL": 15,
}
"""The variables the test areas read their Redis URL from, and the db each uses."""

_RUNNING = ExitStack()


def start_for_this_process() -> None:
    """Under pytest-xdist, start this process's server and set every test URL the
    environment does not set already to it (child processes, such as Celery workers,
    inherit them); elsewhere, or without a redis-server binary, do nothing."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None or shutil.which("redis-server") is None:
        return
    if all(name in os.environ for name in TEST_URLS):
        return  # every area's server chosen already
    port = free_port()
    folder = Path(tempfile.mkdtemp(prefix=f"asyncbook-tests-{worker}-"))
    _RUNNING.callback(shutil.rmtree, folder, ignore_errors=True)  # once the server stopped
    _RUNNING.enter_context(redis_server(folder, "--port", str(port)))
    atexit.register(stop)
    wait_until(partial(redis.Redis(port=port).ping), what=f"redis-server of {worker}")
    for name, db in TEST_URLS.items():
        os.environ.setdefault(name, f"redis://127.0.0.1:{port}/{db}")


def stop() -> None:
    """Stop this process's server, if it started one."""
    _RUNNING.close()
