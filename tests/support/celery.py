"""Helpers for the Celery integration tests: a counting book, apps, waiting, workers (in
process, and a ``celery -A workers worker`` subprocess)."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import celery
import kombu.transport
import pytest
import redis
from celery import Celery
from celery.contrib.testing.worker import start_worker
from kombu import Connection
from kombu.transport import memory

from asyncbook import ApplyItem, AsyncBook, AsyncBookError, AsyncTask, CreateSpec, RedisBook
from asyncbook.celery import Integration, install, uninstall
from asyncbook.redis._sender import CreateSender

from .books import delete_namespace

CELERY_URL = os.environ.get("ASYNCBOOK_CELERY_TEST_REDIS_URL", "redis://127.0.0.1:6379/12")
"""The Redis the Celery tests use as broker, result backend and book (db 12)."""

CELERY_VERSION: tuple[int, int] = (celery.VERSION.major, celery.VERSION.minor)
"""The installed Celery's (major, minor), for a test whose expectation is Celery's own
behaviour and changed between the supported versions (``.ci/celery-matrix`` runs each)."""


class CountingBook(RedisBook):
    """A RedisBook that counts its round trips, by method."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[str] = []

    def create(self, **kwargs: Any) -> AsyncTask:
        self.calls.append("create")
        return super().create(**kwargs)

    def create_many(self, specs: Iterable[CreateSpec]) -> list[AsyncTask | AsyncBookError]:
        self.calls.append("create")  # one round trip of deferred creates
        return super().create_many(specs)

    def create_sender(self) -> CreateSender:
        return _CountingSender(self)

    def apply(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append("apply")
        return super().apply(*args, **kwargs)

    def apply_many(self, items: Iterable[ApplyItem], **kwargs: Any) -> Any:
        self.calls.append("apply_many")
        return super().apply_many(items, **kwargs)

    def expire(self, task_id: str) -> Any:
        self.calls.append("expire")
        return super().expire(task_id)


class _CountingSender(CreateSender):
    """Counts each create it writes as one ``create`` of its book."""

    def __init__(self, book: CountingBook) -> None:
        super().__init__(book.engine)
        self.counting = book

    def send(self, spec: CreateSpec) -> None:
        self.counting.calls.append("create")
        super().send(spec)


class QuickMemoryTransport(memory.Transport):
    """kombu's memory transport, draining for at most ``DRAIN_TIMEOUT`` at a time.

    A worker on a memory broker runs Celery's ``synloop``, which drains for 2 s per cycle
    and, once asked to stop, drains one more cycle (the ``finally`` around its shutdown
    check): an in-process worker with nothing to do took up to 4 s to stop. With shorter
    drains it checks for the shutdown, and its pending operations, every ``DRAIN_TIMEOUT``.
    A drain without a timeout still waits for a message.
    """

    DRAIN_TIMEOUT = 0.05

    def drain_events(
        self, connection: Connection, timeout: float | None = None, **kwargs: Any
    ) -> None:
        if timeout is not None:
            timeout = min(timeout, self.DRAIN_TIMEOUT)
        super().drain_events(connection, timeout=timeout, **kwargs)


MEMORY_BROKER: dict[str, Any] = {
    "broker_transport": QuickMemoryTransport,
    "broker_transport_options": {"polling_interval": 0.01},
}
"""The settings of an app on ``broker="memory://"`` whose in-process worker polls quickly
and stops at once (``QuickMemoryTransport``)."""


def quick_memory_transport(monkeypatch: pytest.MonkeyPatch) -> None:
    """Meanwhile ``memory://`` means ``QuickMemoryTransport``, for apps that name no
    transport of their own (the documentation's snippets): kombu keeps the class of each
    transport name in ``kombu.transport._transport_cache``."""
    cache: dict[str | None, type | None] = vars(kombu.transport)["_transport_cache"]
    monkeypatch.setitem(cache, "memory", QuickMemoryTransport)


@contextmanager
def shared_tasks_kept() -> Iterator[None]:
    """Afterwards Celery forgets the shared tasks defined meanwhile: ``@app.task`` without
    ``shared=False`` adds the task to every app finalized later, in any test."""
    finalizers: set[Any] = vars(celery._state)["_on_app_finalizers"]
    before = set(finalizers)
    try:
        yield
    finally:
        finalizers.intersection_update(before)


def memory_app(
    prefix: str, backend: str | None = "cache+memory://", *, control: Any = None, **conf: Any
) -> Celery:
    """An app on a memory broker (a queue of its own), quick to poll, not the current
    app, with asyncbook's writes quick to flush; ``conf`` is added to its settings and
    ``control`` is its ``control_cls``."""
    app = Celery(
        unique(prefix),
        broker="memory://",
        backend=backend,
        set_as_current=False,
        control=control,
    )
    defaults: dict[str, Any] = {
        "task_default_queue": unique("q"),
        "broker_connection_retry_on_startup": True,
        **MEMORY_BROKER,
        "worker_hijack_root_logger": False,
        "asyncbook_flush_delay": 0.005,
        "asyncbook_retry_for": 2.0,
    }
    app.conf.update({**defaults, **conf})
    return app


@contextmanager
def threaded_worker(app: Celery, book: AsyncBook) -> Iterator[Integration]:
    """``install(app, book)`` and an in-process worker (4 threads) consuming ``app``'s queue;
    uninstalled when it stops."""
    integration = install(app, book)
    with start_worker(app, perform_ping_check=False, pool="threads", concurrency=4):
        yield integration
    uninstall(app)


@contextmanager
def example_app(queue: str, namespace: str, **settings: Any) -> Iterator[Celery]:
    """The example app (``workers.app``), publishing to ``queue`` on the Celery test Redis,
    installed on the book of ``namespace`` (a worker subprocess's, see ``CeleryWorker``),
    with ``settings`` (as the worker's environment gives them) until it is uninstalled."""
    import workers

    app: Celery = workers.app
    app.conf.update(broker_url=CELERY_URL, result_backend=CELERY_URL, task_default_queue=queue)
    app.conf.update(settings)
    install(app, RedisBook.from_url(CELERY_URL, namespace=namespace))
    yield app
    uninstall(app)
    changes = app.conf.changes
    if changes is not None:
        for key in settings:
            changes.pop(key, None)


def close_result_backend(app: Any) -> None:
    """Close this thread's Redis result backend: the pub/sub connection ``AsyncResult.get``
    opened, then the pool (no socket is left for the GC to find in a later test)."""
    backend: Any = app.backend
    consumer = getattr(backend, "result_consumer", None)
    if consumer is not None:
        consumer.stop()
        # Back to a consumer never started: before 5.7, Celery's ResultConsumer.cancel_for
        # (run by AsyncResult.__del__) unsubscribes through a stopped pub/sub, which
        # reconnects, and retries for 20 s when the server is gone (a test's own server).
        consumer._pubsub = None
    backend.client.connection_pool.disconnect()
    # At a module app's teardown the GC finds, now and then, one unclosed socket to the
    # test Redis: with redis-py 5 (Celery 5.5's leg) every run, with 8.2 (Celery 5.6's leg)
    # once, on a loaded CI machine. Three full runs of that leg with every socket's opening
    # stack recorded found no owner (none of the book's connections, none of the app's):
    # collected here without the warning, as an unraisable warning elsewhere (a socket the
    # GC finds during a test) still fails its test.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "unclosed <socket.socket", ResourceWarning)
        gc.collect()


def cleared_namespace(url: str, prefix: str) -> Iterator[str]:
    """A fresh namespace (for a fixture); afterwards the book's keys and the Celery metas
    kept under ``<namespace>:`` (``global_keyprefix``) are removed."""
    name = unique(prefix)
    yield name
    client = redis.Redis.from_url(url)
    for pattern in (f"{{{name}}}*", f"{{{name}{{*", f"{name}:*"):
        for key in client.scan_iter(match=pattern, count=1000):
            client.delete(key)
    client.close()


def wait_for(condition: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02) -> Any:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(interval)


def wait_terminal(book: RedisBook, task_id: str, timeout: float = 15.0) -> AsyncTask:
    """The task once it is terminal."""

    def ended() -> AsyncTask | None:
        task = book.get(task_id)
        return task if task is not None and task.terminal else None

    result: AsyncTask = wait_for(ended, timeout)
    return result


def unique(prefix: str) -> str:
    """A name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def history(task: AsyncTask) -> list[str]:
    """The event types of a task's history, in order."""
    return [entry.event.type for entry in task.history]


class CeleryWorker:
    """A ``celery -A workers worker`` subprocess (prefork) with its own namespace and queue.

    ``extra`` is added to the command line (``-B``, ``-Q ...``); ``log`` collects its output;
    ``app`` is the module ``-A`` names (found under ``root``).
    """

    def __init__(
        self,
        root: Path,
        url: str,
        log: Path,
        *,
        extra: Sequence[str] = (),
        concurrency: int = 2,
        app: str = "workers",
    ) -> None:
        self.namespace = unique("e2e")
        self.queue = unique("e2e-q")
        self.name = f"{unique('w')}@localhost"
        self.log = log
        self.root = root
        self.url = url
        self.extra = list(extra)
        self.concurrency = concurrency
        self.app = app
        self.process: subprocess.Popen[bytes] | None = None
        self.env: dict[str, str] = {}
        """More environment for the worker (the demo's config reads ``ASYNCBOOK_*``)."""

    def start(self, webhook: str = "", ready_timeout: float = 30.0) -> None:
        """Start the worker; returns once it logged ``ready``."""
        env = {
            **os.environ,
            "REDIS_URL": self.url,
            "ASYNCBOOK_NAMESPACE": self.namespace,
            "ASYNCBOOK_QUEUE": self.queue,
            "ASYNCBOOK_WEBHOOK_URL": webhook,
            "PYTHONPATH": str(self.root),
            **self.env,
        }
        command = [
            sys.executable, "-m", "celery", "-A", self.app, "worker", *self.extra,
            "--pool=prefork", "-c", str(self.concurrency), "-n", self.name,
            "--without-gossip", "--without-mingle", "-l", "info",
        ]  # fmt: skip
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                command, cwd=self.root, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        process = self.process
        wait_for(lambda: b" ready." in self.log.read_bytes() or process.poll(), ready_timeout)
        assert process.poll() is None, self.output()

    def stop(self) -> None:
        """SIGTERM (warm shutdown), then SIGKILL after 20 s."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def output(self) -> str:
        """Everything the worker logged so far."""
        return self.log.read_text(errors="replace")

    @contextmanager
    def running(self, client: redis.Redis, webhook: str = "") -> Iterator[CeleryWorker]:
        """The worker started; afterwards stopped, and its namespace's keys and its queue's
        removed through ``client``."""
        try:
            self.start(webhook)
            yield self
        finally:
            self.stop()
            delete_namespace(client, self.namespace)
            for key in client.scan_iter(match=f"*{self.queue}*"):
                client.delete(key)


def active_pid(app: Celery, worker: CeleryWorker, task_id: str) -> int | None:
    """The PID of the pool process of ``worker`` running ``task_id`` (None while none does)."""
    active = app.control.inspect(destination=[worker.name], timeout=1.0).active() or {}
    for running in active.get(worker.name, []):
        if running["id"] == task_id:
            return int(running["worker_pid"])
    return None
