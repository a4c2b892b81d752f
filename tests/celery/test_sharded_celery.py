"""The Celery integration on a sharded namespace (``asyncbook_shards = 4``), end to end.

One real prefork worker (``-c 1``) of an app written for this module, on the Celery test
Redis, with asyncbook's result backend and the book built from the app's settings: tasks
succeed, fail and retry into the right shard; ``AsyncResult`` reads what the book says
(the backend writes the book, then Celery's meta: no fused script on a sharded book);
``async_book_of`` is sharded alike; the worker's sweep expires a task at its deadline;
heartbeats keep a silent task alive, and one whose heartbeats stop is failed as stalled;
cancels written to any shard reach the worker, and a revoke stops a running task; the
worker delivers every shard's notifications. Last, an in-process worker with the book on
a 3-master Redis Cluster (3 shards, one a master).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import textwrap
import uuid
from collections.abc import Iterator
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import redis
from celery import Celery, Task
from celery.contrib.testing.worker import start_worker
from celery.result import AsyncResult

from asyncbook import AsyncTask, RedisBook
from asyncbook.celery import (
    TaskEndedInBook,
    TaskExpired,
    async_book_of,
    install,
    installed,
    report_progress,
    uninstall,
)
from asyncbook.redis import AsyncShardedRedisBook, ShardedRedisBook, stored_shards

from ..support.books import delete_namespace
from ..support.celery import CELERY_URL as URL
from ..support.celery import (
    CeleryWorker,
    active_pid,
    close_result_backend,
    history,
    memory_app,
    unique,
    wait_for,
    wait_terminal,
)

pytestmark = [
    pytest.mark.redis,
    pytest.mark.timeout(120),
    # Celery's Redis result backend calls redis-py's SETEX, which redis-py 8 deprecates.
    pytest.mark.filterwarnings("ignore:Call to deprecated setex:DeprecationWarning"),
]

SHARDS = 4

APP_MODULE = """
import time

import redis
from celery import Celery

from asyncbook.celery import install, report_progress


def notify(notification):
    # The sink: every notification delivered, in a list of the test's.
    client = redis.Redis.from_url("{url}")
    client.rpush("{namespace}:notified", f"{{notification.task_id}} {{notification.state}}")
    client.close()


app = Celery("{name}", set_as_current=False)
app.conf.update(
    broker_url="{url}",
    result_backend="asyncbook+{url}",
    task_default_queue="{queue}",
    broker_connection_retry_on_startup=True,
    task_acks_late=True,
    worker_prefetch_multiplier=1,
    result_expires=600,
    result_backend_transport_options={{"global_keyprefix": "{namespace}:"}},
    asyncbook_redis_url="{url}",
    asyncbook_namespace="{namespace}",
    asyncbook_shards={shards},
    asyncbook_queue="{queue}-asyncbook",
    asyncbook_heartbeat_interval=0.2,
    asyncbook_heartbeat_timeout=1.5,
    asyncbook_sinks=["{name}.notify"],
)
install(app)


@app.task(bind=True, tracked=True, ttl=60, name="sh.ok")
def ok(self, n):
    report_progress(self, 50, cursor=f"{{n}}-half")
    return n


@app.task(tracked=True, ttl=60, name="sh.boom")
def boom():
    raise ValueError("no luck")


@app.task(bind=True, tracked=True, ttl=60, max_retries=2, name="sh.flaky")
def flaky(self, n):
    if self.request.retries == 0:
        raise self.retry(exc=ConnectionError("busy"), countdown=0.2)
    return n


@app.task(bind=True, tracked=True, ttl=60, name="sh.hold")
def hold(self, seconds, report=True):
    # Reports progress every 0.1 s, or stays silent (its heartbeats alone say it lives).
    end = time.monotonic() + seconds
    step = 0
    while time.monotonic() < end:
        time.sleep(0.1)
        step += 1
        if report:
            report_progress(self, min(99, step), cursor=str(step))
    return "held"


@app.task(tracked=True, ttl=60, acks_late=False, name="sh.silent")
def silent(seconds):
    time.sleep(seconds)
    return "back"


@app.task(tracked=True, ttl=1, name="sh.late")
def late():
    time.sleep(2.5)
    return "too late"
"""


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory, client: redis.Redis) -> Iterator[CeleryWorker]:
    """The app module written under a folder of its own, and its worker (one process)."""
    root = tmp_path_factory.mktemp("sharded")
    name = unique("sharded_app").replace("-", "_")
    worker = CeleryWorker(root, URL, root / "worker.log", concurrency=1, app=name)
    module = APP_MODULE.format(
        name=name, url=URL, queue=worker.queue, namespace=worker.namespace, shards=SHARDS
    )
    (root / f"{name}.py").write_text(textwrap.dedent(module))
    with worker.running(client):
        yield worker
    for key in client.scan_iter(match=f"{worker.namespace}:*"):  # Celery's metas
        client.delete(key)


@pytest.fixture(scope="module")
def app(worker: CeleryWorker) -> Iterator[Celery]:
    """The same app, imported here: it publishes, and reads results."""
    path = worker.root / f"{worker.app}.py"
    spec = importlib.util.spec_from_file_location(worker.app, path)
    assert spec is not None
    assert spec.loader is not None
    module: ModuleType = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    app: Celery = module.app
    yield app
    integration = installed(app)
    built = None if integration is None else integration.built_book()
    uninstall(app)
    close_result_backend(app)
    if isinstance(built, RedisBook):
        built.client.close()


@pytest.fixture(scope="module")
def book(worker: CeleryWorker) -> Iterator[RedisBook]:
    """The test's own handle on the namespace (as a console or an API would open it)."""
    book = RedisBook.from_url(URL, namespace=worker.namespace, shards=SHARDS)
    yield book
    book.client.close()


def ids_in_every_shard(book: RedisBook) -> list[str]:
    """One fresh task id per shard, in shard order."""
    assert isinstance(book, ShardedRedisBook)
    found: dict[int, str] = {}
    while len(found) < book.shards:
        task_id = str(uuid.uuid4())
        found.setdefault(book.map.index_of(task_id), task_id)
    return [found[index] for index in range(book.shards)]


def in_state(book: RedisBook, task_id: str, state: str, timeout: float = 15.0) -> AsyncTask:
    def reached() -> AsyncTask | None:
        task = book.get(task_id)
        return task if task is not None and task.state == state else None

    task: AsyncTask = wait_for(reached, timeout)
    return task


def notified(client: redis.Redis, book: RedisBook, *task_ids: str) -> list[str]:
    """What the sink received for ``task_ids``, once it received one for each."""

    def received() -> list[str]:
        raw: Any = client.lrange(f"{book.namespace}:notified", 0, -1)
        found = [entry.decode() for entry in raw if entry.decode().split()[0] in task_ids]
        return found if {entry.split()[0] for entry in found} == set(task_ids) else []

    found: list[str] = wait_for(received, timeout=15)
    return sorted(found)


def logged(worker: CeleryWorker, text: str, timeout: float = 15.0) -> None:
    wait_for(lambda: text in worker.output(), timeout, interval=0.05)


def test_the_setting_builds_a_sharded_book_that_creates_at_publish(
    app: Celery, book: RedisBook
) -> None:
    integration = installed(app)
    assert integration is not None
    built = integration.book
    assert isinstance(built, ShardedRedisBook)
    assert (built.namespace, built.shards) == (book.namespace, SHARDS)
    # No create sender on a sharded book: a publish writes its create before it sends.
    assert integration.publishing.deferred_creates() is None
    for task_id in ids_in_every_shard(book):
        app.tasks["sh.ok"].apply_async((1,), task_id=task_id)
        assert book.get(task_id) is not None  # in the book as the publish returned
    assert stored_shards(book.client, book.namespace) == SHARDS
    # Its asyncio twin is sharded alike.
    twin = async_book_of(app)
    assert isinstance(twin, AsyncShardedRedisBook)

    async def read(task_id: str) -> AsyncTask | None:
        async with twin:
            return await twin.get(task_id)

    assert asyncio.run(read(task_id)) is not None
    # The backend writes the book, then Celery's meta: no script beside a sharded book.
    backend: Any = app.backend
    assert backend._fused(integration) is None


def test_outcomes_are_recorded_in_their_shards_and_read_by_asyncresult(
    app: Celery, book: RedisBook, worker: CeleryWorker, client: redis.Redis
) -> None:
    ok, boom, flaky = (app.tasks[f"sh.{name}"] for name in ("ok", "boom", "flaky"))
    done = [
        ok.apply_async((n,), task_id=task_id) for n, task_id in enumerate(ids_in_every_shard(book))
    ]
    failed = boom.delay()
    retried = flaky.delay(8)

    assert [result.get(timeout=20) for result in done] == list(range(SHARDS))
    with pytest.raises(ValueError, match="no luck"):
        failed.get(timeout=20)
    assert retried.get(timeout=20) == 8

    backend: Any = app.backend
    for result in done:
        task = wait_terminal(book, result.id)
        assert (task.state, history(task)) == ("succeeded", ["start", "progress", "succeed"])
        assert task.result_ref == backend.get_key_for_task(result.id).decode()
        assert book.last_cursor(result.id) is not None
        # Its shard holds it, no other.
        assert isinstance(book, ShardedRedisBook)
        holders = [
            index
            for index, shard in enumerate(book.ns.shards)
            if book.client.exists(shard.keys.task(result.id))
        ]
        assert holders == [book.map.index_of(result.id)]
    task = wait_terminal(book, failed.id)
    assert (task.state, history(task)) == ("failed", ["start", "fail"])
    assert failed.state == "FAILURE"
    task = wait_terminal(book, retried.id)
    assert (task.state, task.attempts) == ("succeeded", 2)
    assert history(task) == ["start", "fail", "start", "succeed"]
    assert "refused" not in worker.output()
    # The worker delivers every shard's notifications, each once.
    ended = [*done, failed, retried]
    assert notified(client, book, *(result.id for result in ended)) == sorted(
        [f"{result.id} succeeded" for result in [*done, retried]] + [f"{failed.id} failed"]
    )


def test_the_workers_sweep_expires_a_task_at_its_deadline(app: Celery, book: RedisBook) -> None:
    result = app.tasks["sh.late"].delay()  # a 1 s ttl; it runs for 2.5 s
    task = in_state(book, result.id, "expired", timeout=15)
    assert history(task)[0] == "start"
    # Its late end is refused; Celery's meta says what the book says.
    with pytest.raises(TaskExpired):
        result.get(timeout=20)
    assert wait_terminal(book, result.id).state == "expired"


def test_heartbeats_keep_a_silent_task_running_past_its_heartbeat_timeout(
    app: Celery, book: RedisBook
) -> None:
    result = app.tasks["sh.hold"].delay(3.0, report=False)  # silent for 2x the timeout
    in_state(book, result.id, "running")
    assert isinstance(book, ShardedRedisBook)
    stalls = book.shard_of(result.id).keys.stalls
    first = wait_for(lambda: book.client.zscore(stalls, result.id))
    # A heartbeat moves its stall time on, in its shard.
    wait_for(lambda: (score := book.client.zscore(stalls, result.id)) and score > first)
    assert result.get(timeout=20) == "held"
    task = wait_terminal(book, result.id)
    assert (task.state, history(task)) == ("succeeded", ["start", "succeed"])


def test_a_task_whose_heartbeats_stop_is_failed_as_stalled(
    app: Celery, book: RedisBook, worker: CeleryWorker
) -> None:
    result = app.tasks["sh.silent"].delay(2.0)  # stopped until the sweep fails it
    in_state(book, result.id, "running")
    pid = wait_for(lambda: active_pid(app, worker, result.id))
    os.kill(pid, signal.SIGSTOP)  # its process, heartbeat thread included, stands still
    try:
        # The worker's main process sweeps every shard: the task is failed as stalled.
        task = in_state(book, result.id, "failed", timeout=15)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert task.error is not None
    assert task.error.startswith("stalled"), task.error
    # Its late success is refused; Celery's meta says what the book says.
    with pytest.raises(TaskEndedInBook, match="stalled"):
        result.get(timeout=20)


def test_cancels_written_to_any_shard_reach_the_worker(
    app: Celery, book: RedisBook, worker: CeleryWorker, client: redis.Redis
) -> None:
    busy = app.tasks["sh.hold"].delay(2.0)
    in_state(book, busy.id, "running")
    queued = [
        app.tasks["sh.ok"].apply_async((n,), task_id=task_id)
        for n, task_id in enumerate(ids_in_every_shard(book))
    ]
    for result in queued:
        # As the CLI or the web console cancels: in the book only, no Celery revoke.
        assert book.cancel(result.id, "not needed").reason == "cancelled"

    # The worker follows every shard's cancels channel: each message is discarded unrun.
    for result in queued:
        logged(worker, f"Discarding revoked task: sh.ok[{result.id}]")
    assert busy.get(timeout=20) == "held"
    for result in queued:
        task = book.get(result.id)
        assert task is not None
        assert (task.state, task.error, history(task)) == ("cancelled", "not needed", ["cancel"])
        assert str(result.state) == "REVOKED"
    ids = [result.id for result in queued]
    assert notified(client, book, *ids) == sorted(f"{task_id} cancelled" for task_id in ids)


def test_a_revoke_stops_a_running_task_at_its_next_progress(
    app: Celery, book: RedisBook, worker: CeleryWorker
) -> None:
    result = app.tasks["sh.hold"].delay(20.0)
    wait_for(lambda: (task := book.get(result.id)) is not None and task.progress >= 3)
    result.revoke()  # Celery's own revoke: cancelled in the book first
    task = book.get(result.id)
    assert task is not None
    assert (task.state, task.error) == ("cancelled", "revoked")
    logged(worker, f"Task sh.hold[{result.id}] ignored")
    task = book.get(result.id)
    assert task is not None
    assert (task.state, history(task)[0], history(task)[-1]) == ("cancelled", "start", "cancel")
    assert task.progress < 100
    assert AsyncResult(result.id, app=app).state in ("PENDING", "REVOKED")


@pytest.mark.long
def test_on_a_redis_cluster_the_shards_spread_over_its_masters(
    cluster_url: str, client: redis.Redis
) -> None:
    """The book on a 3-master Cluster (3 shards), Celery's broker in memory and its results
    on the test Redis: an in-process worker's tasks are recorded on every master, and a
    cancel in the book reaches the worker through every shard's channel."""
    namespace = unique("sharded-cluster")
    app = memory_app(
        "cluster",
        backend=f"asyncbook+{URL}",
        result_backend_thread_safe=True,
        result_backend_transport_options={"global_keyprefix": f"{namespace}:"},
        asyncbook_redis_url=cluster_url,
        asyncbook_namespace=namespace,
        asyncbook_shards=3,
    )

    @app.task(bind=True, shared=False, tracked=True, ttl=60, name="cl.ok")
    def ok(self: Task[Any, Any], n: int) -> int:
        report_progress(self, 50)
        return n

    integration = install(app)
    book = integration.book
    assert isinstance(book, ShardedRedisBook)
    try:
        assert sorted(len(shards) for shards in book.shard_map().values()) == [1, 1, 1]
        with start_worker(app, perform_ping_check=False, pool="threads", concurrency=2):
            ids = ids_in_every_shard(book)
            done = [ok.apply_async((n,), task_id=task_id) for n, task_id in enumerate(ids)]
            assert [result.get(timeout=20) for result in done] == [0, 1, 2]
            # What worker_ready starts in a worker's main process (an embedded worker sends
            # it to no one): the cancel watch, the sweep and delivery.
            integration.service.on_worker_ready(sender=SimpleNamespace(app=app, hostname="cl@h"))
            later = [
                ok.apply_async((9,), countdown=3, task_id=task_id)
                for task_id in ids_in_every_shard(book)
            ]
            for result in later:
                assert book.cancel(result.id, "not needed").reason == "cancelled"
            wait_for(lambda: all(str(result.state) == "REVOKED" for result in later), 20)
        for result in done:
            task = wait_terminal(book, result.id)
            assert (task.state, history(task)) == ("succeeded", ["start", "progress", "succeed"])
        for result in later:
            cancelled = book.get(result.id)
            assert cancelled is not None
            assert (cancelled.state, history(cancelled)) == ("cancelled", ["cancel"])
    finally:
        uninstall(app)
        watch = integration.running.process.cancel_watch
        if watch is not None:
            watch.stop()
        close_result_backend(app)
        delete_namespace(book.client, namespace)
        book.client.close()
        for key in client.scan_iter(match=f"{namespace}:*"):
            client.delete(key)
