"""asyncbook as Celery's result backend: one record, one round trip per tracked execution.

Real Redis (db 12 unless ASYNCBOOK_CELERY_TEST_REDIS_URL says otherwise): an in-process
worker (memory broker) for most tests, and one prefork worker on the Redis broker. After
each execution the book and Celery's meta agree.
"""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery, Task, chord, group, signals
from celery.app.backends import by_url
from celery.backends.redis import RedisBackend, SentinelBackend
from celery.contrib.testing.worker import start_worker
from celery.exceptions import ChordError, ImproperlyConfigured, TaskRevokedError
from celery.result import AsyncResult

from asyncbook import AsyncState, AsyncTask, CreateSpec, RedisBook
from asyncbook.celery import (
    AsyncBookBackend,
    AsyncBookSentinelBackend,
    TaskExpired,
    _late,
    install,
    installed,
    report_progress,
    uninstall,
)
from asyncbook.celery._late import LateWrites
from asyncbook.celery._urls import sentinel_book_url

from ..support import ROOT
from ..support.celery import CELERY_URL as URL
from ..support.celery import MEMORY_BROKER, close_result_backend, unique, wait_for
from ..support.servers import free_port, redis_server, wait_until

pytestmark = [
    pytest.mark.redis,
    pytest.mark.timeout(120),
    # Celery's Redis result backend calls redis-py's SETEX, which redis-py 8 deprecates.
    pytest.mark.filterwarnings("ignore:Call to deprecated setex:DeprecationWarning"),
]

# What Celery's meta says for each state of the book.
CELERY_STATE = {
    AsyncState.SUCCEEDED: "SUCCESS",
    AsyncState.FAILED: "FAILURE",
    AsyncState.EXPIRED: "FAILURE",
    AsyncState.CANCELLED: "REVOKED",
}


def make_app(namespace: str, *, backend: str | None = None, **conf: Any) -> Celery:
    app = Celery(
        unique("backend"),
        broker="memory://",
        backend=backend or f"asyncbook+{URL}",
        set_as_current=False,
    )
    settings: dict[str, Any] = {
        "task_default_queue": unique("q"),
        "broker_connection_retry_on_startup": True,
        **MEMORY_BROKER,
        "worker_hijack_root_logger": False,
        "asyncbook_namespace": namespace,
        "asyncbook_flush_delay": 0.005,
        # One backend for every thread (Celery keeps one per thread otherwise), so the
        # fixture closes the worker threads' Redis clients too.
        "result_backend_thread_safe": True,
        "result_expires": 600,
        # Metas of this test only (other tests' clean-ups remove celery-task-meta-*).
        "result_backend_transport_options": {"global_keyprefix": f"{namespace}:"},
    }
    app.conf.update(settings | conf)
    counter = f"{namespace}:callbacks"

    @app.task(bind=True, shared=False, tracked=True, ttl=60, name="b.ok")
    def ok(self: Task[Any, Any], n: int) -> int:
        report_progress(self, 50, cursor=f"{n}-half")
        return n

    @app.task(shared=False, tracked=True, ttl=60, name="b.boom")
    def boom() -> None:
        raise ValueError("no luck")

    @app.task(bind=True, shared=False, tracked=True, ttl=60, max_retries=2, name="b.flaky")
    def flaky(self: Task[Any, Any], n: int) -> int:
        if self.request.retries == 0:
            raise self.retry(exc=ConnectionError("busy"), countdown=0.3)
        return n

    @app.task(shared=False, tracked=True, ttl=60, ignore_result=True, name="b.quiet")
    def quiet() -> str:
        return "unseen"

    @app.task(shared=False, tracked=True, ttl=0.3, name="b.late")
    def late() -> str:
        time.sleep(0.6)
        return "too late"

    @app.task(bind=True, shared=False, tracked=True, ttl=60, name="b.cancelled")
    def cancelled(self: Task[Any, Any]) -> str:
        integration = installed(self.app)
        assert integration is not None
        integration.book.cancel(str(self.request.id), "not needed")
        return "done anyway"

    @app.task(bind=True, shared=False, tracked=True, ttl=60, track_started=True, name="b.step")
    def step(self: Task[Any, Any], seen: str) -> str:
        self.update_state(state="PROGRESS", meta={"percent": 50})
        client = redis.Redis.from_url(URL)
        backend: Any = self.backend  # its key, as Celery names it (5.4 put "_" after the prefix)
        client.rpush(seen, client.get(backend.get_key_for_task(self.request.id)) or b"")
        client.close()
        return "stepped"

    @app.task(
        shared=False,
        tracked=True,
        ttl=60,
        ignore_result=True,
        store_errors_even_if_ignored=True,
        name="b.quiet_boom",
    )
    def quiet_boom() -> None:
        raise KeyError("kept")

    @app.task(shared=False, name="b.plain")
    def plain(n: int) -> int:
        return n * 2

    @app.task(shared=False, name="b.total")
    def total(values: list[int]) -> int:
        client = redis.Redis.from_url(URL)
        client.incr(counter)
        client.close()
        return sum(values)

    return app


@pytest.fixture
def app(namespace: str) -> Iterator[Celery]:
    app = make_app(namespace)
    install(app)
    yield app
    uninstall(app)
    close_result_backend(app)
    app.close()


def stored_meta(app: Celery, task_id: str) -> dict[str, Any]:
    """Celery's meta as stored in Redis (not a cached copy)."""
    backend: Any = app.backend
    meta: dict[str, Any] = backend.get_task_meta(task_id, cache=False)
    return meta


def assert_agree(app: Celery, book: RedisBook, task_id: str) -> AsyncTask:
    """The book and Celery's meta say the same about ``task_id``."""
    task = book.get(task_id)
    assert task is not None
    meta = stored_meta(app, task_id)
    if task.terminal:
        assert meta["status"] == CELERY_STATE[task.state], (task, meta)
        if task.state is AsyncState.EXPIRED:
            assert isinstance(meta["result"], TaskExpired)
        if task.state is AsyncState.FAILED:
            assert not isinstance(meta["result"], TaskExpired)
        if task.state is AsyncState.SUCCEEDED:
            backend: Any = app.backend
            assert task.result_ref == backend.get_key_for_task(task_id).decode()
    else:
        assert meta["status"] in ("PENDING", "RETRY", "STARTED"), (task, meta)
    return task


def history(task: AsyncTask) -> list[str]:
    return [entry.event.type for entry in task.history]


def test_the_url_picks_asyncbooks_backend(namespace: str) -> None:
    for url in ("redis://127.0.0.1:6379/12", "rediss://127.0.0.1:6379/12?ssl_cert_reqs=none"):
        app = make_app(namespace, backend=f"asyncbook+{url}")
        backend: Any = app.backend
        assert type(backend) is AsyncBookBackend
        assert isinstance(backend, RedisBackend)
        assert backend.as_uri(include_password=True) == url


def test_the_books_url_behind_sentinel() -> None:
    url = "sentinel://:s3cret%3Apw@10.0.0.1:26379/2;sentinel://:s3cret%3Apw@10.0.0.2/2"
    assert sentinel_book_url(url, "my master") == (
        "redis+sentinel://:s3cret%3Apw@10.0.0.1:26379,10.0.0.2:26379/my%20master/2"
    )
    assert sentinel_book_url("sentinel://h:1", "m") == "redis+sentinel://h:1/m/0"


def test_the_url_picks_the_sentinel_class_not_new(namespace: str) -> None:
    """Celery resolves ``asyncbook+sentinel://`` to the entry point ``asyncbook``, which
    builds the Sentinel class for the scheme; the plain class refuses a Sentinel URL
    rather than becoming another class in ``__new__`` (issue 31)."""
    app = make_app(namespace)
    url = "sentinel://127.0.0.1:1/0"
    resolved: Any = by_url(f"asyncbook+{url}", app.loader)  # (the class, the rest of the URL)
    make, rest = resolved
    assert rest == url
    assert type(make(app=app, url=rest)) is AsyncBookSentinelBackend
    assert type(make(app=app, url=URL)) is AsyncBookBackend
    with pytest.raises(ImproperlyConfigured, match="AsyncBookSentinelBackend"):
        AsyncBookBackend(app=app, url=url)


def test_behind_sentinel_one_write_holds_both(tmp_path: Path, namespace: str) -> None:
    """``asyncbook+sentinel://`` with a master_name: the book is on the master Sentinel
    names (derived from the backend's URL), written in the same script as the meta."""
    port, sentinel_port = free_port(), free_port()
    config = tmp_path / "sentinel.conf"
    config.write_text(f"port {sentinel_port}\nsentinel monitor books 127.0.0.1 {port} 1\n")
    with (
        redis_server(tmp_path / "master", "--port", str(port)),
        redis_server(tmp_path / "sentinel", str(config), "--sentinel"),
    ):
        sentinel = redis.Redis(port=sentinel_port)
        # sentinel_masters: redis-py 6.4's sentinel_get_master_addr_by_name fails to parse.
        wait_until(lambda: "books" in sentinel.sentinel_masters(), what="sentinel")
        sentinel.close()
        url = f"sentinel://127.0.0.1:{sentinel_port}/0"
        app = make_app(
            namespace,
            backend=f"asyncbook+{url}",
            result_backend_transport_options={"master_name": "books"},
        )
        backend: Any = app.backend
        assert type(backend) is AsyncBookSentinelBackend
        assert isinstance(app.backend, SentinelBackend)
        integration = install(app)
        try:
            with start_worker(app, perform_ping_check=False):
                result = app.tasks["b.ok"].delay(3)
                assert result.get(timeout=10) == 3
            book = integration.book
            assert isinstance(book, RedisBook)
            task = assert_agree(app, book, result.id)
            assert history(task) == ["start", "progress", "succeed"]
            assert backend._fused(integration) is not None  # one script, not two writes
            master = redis.Redis(port=port)
            assert master.exists(book.keys.task(result.id)) == 1
            master.close()
        finally:
            uninstall(app)
            close_result_backend(app)
            book_client: Any = integration.book
            book_client.client.close()


def test_success_failure_and_untracked_agree(app: Celery, book: RedisBook) -> None:
    ok, boom, plain = (app.tasks[f"b.{name}"] for name in ("ok", "boom", "plain"))
    with start_worker(app, perform_ping_check=False):
        done = ok.delay(7)
        failed = boom.delay()
        untracked = plain.delay(21)
        assert done.get(timeout=10) == 7
        with pytest.raises(ValueError, match="no luck"):
            failed.get(timeout=10)
        assert untracked.get(timeout=10) == 42
    assert (done.state, done.info, done.ready()) == ("SUCCESS", 7, True)
    assert failed.state == "FAILURE"
    assert isinstance(failed.info, ValueError)
    assert "no luck" in str(failed.traceback)
    succeeded = assert_agree(app, book, done.id)
    assert history(succeeded) == ["start", "progress", "succeed"]
    ended = assert_agree(app, book, failed.id)
    assert ended.state is AsyncState.FAILED
    assert ended.error == "ValueError: no luck"
    assert book.get(untracked.id) is None  # untracked: Celery's meta only
    assert stored_meta(app, untracked.id)["status"] == "SUCCESS"


def test_a_retry_with_countdown_then_success(app: Celery, book: RedisBook) -> None:
    flaky = app.tasks["b.flaky"]
    seen: list[str] = []

    def on_retry(sender: Any = None, request: Any = None, **_: Any) -> None:
        seen.append(stored_meta(app, str(request.id))["status"])

    signals.task_retry.connect(on_retry, weak=False)
    try:
        with start_worker(app, perform_ping_check=False):
            result = flaky.delay(3)
            assert result.get(timeout=15) == 3
    finally:
        signals.task_retry.disconnect(on_retry)
    assert seen == ["RETRY"]  # stored by the backend, with the book's retry fail
    task = assert_agree(app, book, result.id)
    assert history(task) == ["start", "fail", "start", "succeed"]
    assert task.attempts == 2


def test_ignore_result_writes_the_book_only(app: Celery, book: RedisBook) -> None:
    quiet = app.tasks["b.quiet"]
    with start_worker(app, perform_ping_check=False):
        result = quiet.delay()
        task = wait_for(lambda: (t := book.get(result.id)) is not None and t.terminal and t)
    assert task.state is AsyncState.SUCCEEDED
    assert task.result_ref == f"ignored:{result.id}"
    assert stored_meta(app, result.id)["status"] == "PENDING"


def test_a_success_past_the_deadline_reads_as_expired(app: Celery, book: RedisBook) -> None:
    late = app.tasks["b.late"]
    with start_worker(app, perform_ping_check=False):
        result = late.delay()
        with pytest.raises(TaskExpired, match="after its deadline"):
            result.get(timeout=10)
    assert result.state == "FAILURE"
    assert isinstance(result.info, TaskExpired)
    task = assert_agree(app, book, result.id)
    assert task.state is AsyncState.EXPIRED


def test_a_cancelled_task_reads_as_revoked(app: Celery, book: RedisBook) -> None:
    cancelled = app.tasks["b.cancelled"]
    with start_worker(app, perform_ping_check=False):
        result = cancelled.delay()
        with pytest.raises(TaskRevokedError):
            result.get(timeout=10)
    assert str(result.state) == "REVOKED"
    task = assert_agree(app, book, result.id)
    assert task.state is AsyncState.CANCELLED
    assert task.error == "not needed"


def test_an_expired_message_reads_as_expired(
    app: Celery, book: RedisBook, caplog: pytest.LogCaptureFixture
) -> None:
    """Its deadline passed before a worker took it: Celery discards it as revoked; the
    book expires it, and the meta says what the book says, in one write."""
    result = app.tasks["b.ok"].apply_async((1,), expires=0.2)
    time.sleep(0.4)
    with start_worker(app, perform_ping_check=False):
        wait_for(lambda: stored_meta(app, result.id)["status"] != "PENDING")
    assert result.state == "FAILURE"
    assert isinstance(result.info, TaskExpired)
    task = assert_agree(app, book, result.id)
    assert task.state is AsyncState.EXPIRED
    assert history(task) == ["expire"]
    assert "refused" not in caplog.text


def test_a_task_revoked_before_it_ran_reads_as_revoked(app: Celery, book: RedisBook) -> None:
    result = app.tasks["b.ok"].apply_async((1,), countdown=0.5)
    app.control.revoke(result.id)  # no worker listens yet: the worker's own revoked set
    from celery.worker import state

    state.revoked.add(result.id)
    try:
        with start_worker(app, perform_ping_check=False):
            wait_for(lambda: stored_meta(app, result.id)["status"] != "PENDING")
    finally:
        state.revoked.discard(result.id)
    assert str(result.state) == "REVOKED"
    task = assert_agree(app, book, result.id)
    assert task.state is AsyncState.CANCELLED
    assert task.error == "revoked"


def test_a_group_and_a_chord_of_20(app: Celery, book: RedisBook, namespace: str) -> None:
    ok, total = app.tasks["b.ok"], app.tasks["b.total"]
    client = redis.Redis.from_url(URL)
    with start_worker(app, perform_ping_check=False):
        grouped = group(ok.s(n) for n in range(20)).apply_async()
        assert grouped.get(timeout=30) == list(range(20))
        chorded = chord([ok.s(n) for n in range(20)], total.s()).apply_async()
        # The worker's thread publishes the callback, which subscribes on the result consumer
        # this thread waits on. Only Celery 5.7's ResultConsumer is thread-safe (before it,
        # the SUCCESS message can be lost): wait for the stored result, then read it.
        wait_for(chorded.ready, timeout=30)
        assert chorded.get(timeout=5) == sum(range(20))
        time.sleep(0.3)  # a second callback, if any, would have run by now
    assert client.get(f"{namespace}:callbacks") == b"1"
    client.close()
    parent: Any = chorded.parent
    results: list[Any] = [grouped, parent]
    for result in results:
        assert result is not None
        summary = book.group(str(result.id))
        assert summary is not None
        assert summary.counts["succeeded"] == 20
        for member in result.results:
            assert assert_agree(app, book, member.id).state is AsyncState.SUCCEEDED


def test_a_saved_group_restores(app: Celery, book: RedisBook) -> None:
    ok = app.tasks["b.ok"]
    with start_worker(app, perform_ping_check=False):
        result: Any = group(ok.s(n) for n in range(3)).apply_async()
        result.save()
        assert result.get(timeout=10) == [0, 1, 2]
    restored = app.GroupResult.restore(result.id)
    assert restored is not None
    assert restored.get(timeout=5) == [0, 1, 2]


def test_one_round_trip_per_tracked_execution(app: Celery, book: RedisBook) -> None:
    """From prerun to postrun, the worker thread sends one command (one call of
    execution.lua) and the recorder's thread none: the buffered start and progress ride
    with it."""
    app.conf.asyncbook_flush_delay = 1.0  # the recorder would wait; the backend does not
    ok = app.tasks["b.ok"]
    sent: list[tuple[str, bytes]] = []
    counting = threading.Event()
    watched: set[str] = {"asyncbook-recorder"}  # and the thread that runs the task
    original: Any = redis.connection.AbstractConnection.send_packed_command

    def send(self: Any, command: Any, check_health: bool = True) -> None:
        thread = threading.current_thread().name
        if counting.is_set() and thread in watched:
            chunks = command if isinstance(command, list) else [command]
            packed = b"".join(bytes(chunk) for chunk in chunks)
            if b"PING" not in packed[:40]:
                sent.append((thread, packed))
        original(self, command, check_health)

    def start(*_: Any, **__: Any) -> None:
        watched.add(threading.current_thread().name)
        counting.set()

    def stop(*_: Any, **__: Any) -> None:
        counting.clear()

    signals.task_prerun.connect(start, weak=False)
    signals.task_postrun.connect(stop, weak=False)
    redis.connection.AbstractConnection.send_packed_command = send  # type: ignore[method-assign]
    try:
        with start_worker(app, perform_ping_check=False) as worker_thread:
            assert worker_thread is not None
            warm_up = ok.delay(0)  # scripts cached, connections open
            assert warm_up.get(timeout=10) == 0
            # AsyncResult.__del__ unsubscribes in whichever thread the collector runs:
            # no collection while counting, so the worker's thread sends only its own
            gc.collect()
            gc.disable()
            sent.clear()
            result = ok.delay(1)
            assert result.get(timeout=10) == 1
    finally:
        gc.enable()
        redis.connection.AbstractConnection.send_packed_command = original  # type: ignore[method-assign]
        signals.task_prerun.disconnect(start)
        signals.task_postrun.disconnect(stop)
    workers = [packed for thread, packed in sent if thread != "asyncbook-recorder"]
    assert [thread for thread, _ in sent].count("asyncbook-recorder") == 0
    assert len(workers) == 1, workers
    (batch,) = workers
    # start, progress, succeed and the meta: one call (FCALL to the events script's own
    # library, EVALSHA where the server has no functions)
    assert batch.count(b"\r\nEVALSHA\r\n") + batch.count(b"\r\nFCALL\r\n") == 1
    assert b"MULTI" not in batch
    task = assert_agree(app, book, result.id)
    assert history(task) == ["start", "progress", "succeed"]


def test_a_book_on_another_redis_is_written_apart(namespace: str) -> None:
    other = URL.rsplit("/", 1)[0] + "/13"
    app = make_app(namespace, asyncbook_redis_url=other)
    install(app)
    book = RedisBook.from_url(other, namespace=namespace)
    try:
        with start_worker(app, perform_ping_check=False):
            done = app.tasks["b.ok"].delay(5)
            late = app.tasks["b.late"].delay()
            cancelled = app.tasks["b.cancelled"].delay()
            assert done.get(timeout=10) == 5
            with pytest.raises(TaskExpired):
                late.get(timeout=10)
            # The meta says what the book says, its reason included.
            with pytest.raises(TaskRevokedError, match="not needed"):
                cancelled.get(timeout=10)
        assert assert_agree(app, book, done.id).state is AsyncState.SUCCEEDED
        assert assert_agree(app, book, late.id).state is AsyncState.EXPIRED
        assert assert_agree(app, book, cancelled.id).state is AsyncState.CANCELLED
    finally:
        uninstall(app)
        client = redis.Redis.from_url(other)
        for key in client.scan_iter(match=f"{{{namespace}}}*", count=1000):
            client.delete(key)
        client.close()


def test_a_stored_success_is_never_overwritten(app: Celery, book: RedisBook) -> None:
    """Celery's guard runs inside Redis: a second execution's failure leaves the SUCCESS."""
    ok, boom = app.tasks["b.ok"], app.tasks["b.boom"]
    with start_worker(app, perform_ping_check=False):
        result = ok.delay(9)
        assert result.get(timeout=10) == 9
        # The same id again (a redelivery that fails this time).
        boom.apply_async(task_id=result.id)
        time.sleep(0.5)
    meta = stored_meta(app, result.id)
    assert (meta["status"], meta["result"]) == ("SUCCESS", 9)
    assert book.get(result.id) is not None


def test_a_lost_script_is_loaded_again(app: Celery, book: RedisBook) -> None:
    ok = app.tasks["b.ok"]
    with start_worker(app, perform_ping_check=False):
        assert ok.delay(1).get(timeout=10) == 1
        redis.Redis.from_url(URL).script_flush()
        result = ok.delay(2)
        assert result.get(timeout=10) == 2
    assert assert_agree(app, book, result.id).state is AsyncState.SUCCEEDED


def test_a_lost_library_is_loaded_again(app: Celery, book: RedisBook) -> None:
    """An early-acked execution's write, not waited for, meets no library (FUNCTION
    FLUSH): read late, it runs again as a call sent alone would."""
    ok = app.tasks["b.ok"]
    with start_worker(app, perform_ping_check=False):
        assert ok.delay(1).get(timeout=10) == 1
        client = redis.Redis.from_url(URL)
        client.function_flush()
        client.script_flush()
        result = ok.delay(2)
        assert result.get(timeout=10) == 2
    assert assert_agree(app, book, result.id).state is AsyncState.SUCCEEDED


def test_async_result_of_a_running_task(app: Celery, book: RedisBook) -> None:
    ok = app.tasks["b.ok"]
    result: AsyncResult[Any] = AsyncResult("never-sent", app=app)
    assert (result.state, result.ready(), result.info) == ("PENDING", False, None)
    with start_worker(app, perform_ping_check=False):
        assert ok.delay(4).get(timeout=10) == 4


def test_track_started_and_update_state_then_success(app: Celery, book: RedisBook) -> None:
    seen = f"{app.conf.asyncbook_namespace}:seen"
    client = redis.Redis.from_url(URL)
    with start_worker(app, perform_ping_check=False):
        result = app.tasks["b.step"].delay(seen)
        assert result.get(timeout=10) == "stepped"
    (during,) = client.lrange(seen, 0, -1)
    client.close()
    assert json.loads(during)["status"] == "PROGRESS"  # update_state: Celery's own write
    assert json.loads(during)["result"] == {"percent": 50}
    task = assert_agree(app, book, result.id)
    assert history(task) == ["start", "succeed"]


def test_result_extended_keeps_name_and_args(namespace: str, book: RedisBook) -> None:
    app = make_app(namespace, result_extended=True)
    install(app)
    try:
        with start_worker(app, perform_ping_check=False):
            result = app.tasks["b.ok"].delay(9)
            assert result.get(timeout=10) == 9
        fresh: AsyncResult[Any] = AsyncResult(result.id, app=app)
        assert (fresh.name, list(fresh.args or ()), fresh.state) == ("b.ok", [9], "SUCCESS")
        assert assert_agree(app, book, result.id).state is AsyncState.SUCCEEDED
    finally:
        uninstall(app)
        close_result_backend(app)


def test_an_ignored_result_still_stores_its_error(app: Celery, book: RedisBook) -> None:
    with start_worker(app, perform_ping_check=False):
        result = app.tasks["b.quiet_boom"].delay()
        task = wait_for(lambda: (t := book.get(result.id)) is not None and t.terminal and t)
    assert task.state is AsyncState.FAILED
    assert task.error == "KeyError: 'kept'"
    assert stored_meta(app, result.id)["status"] == "FAILURE"  # store_errors_even_if_ignored
    assert_agree(app, book, result.id)


def test_a_chord_with_a_failing_member(app: Celery, book: RedisBook, namespace: str) -> None:
    ok, boom, total = app.tasks["b.ok"], app.tasks["b.boom"], app.tasks["b.total"]
    with start_worker(app, perform_ping_check=False):
        chorded = chord([ok.s(1), boom.s(), ok.s(2)], total.s()).apply_async()
        with pytest.raises(ValueError, match="no luck"):  # get() raises the member's error
            chorded.get(timeout=30)
        wait_for(chorded.ready)
    assert chorded.state == "FAILURE"
    assert isinstance(chorded.result, ChordError)
    client = redis.Redis.from_url(URL)
    assert client.get(f"{namespace}:callbacks") is None  # the callback never ran
    client.close()
    parent: Any = chorded.parent
    states = [assert_agree(app, book, member.id).state for member in parent.results]
    assert states == [AsyncState.SUCCEEDED, AsyncState.FAILED, AsyncState.SUCCEEDED]


def test_eager_with_stored_results(namespace: str, book: RedisBook) -> None:
    app = make_app(namespace, task_always_eager=True, task_store_eager_result=True)
    install(app)
    try:
        result = app.tasks["b.ok"].delay(6)
        assert result.get(timeout=10) == 6
        assert stored_meta(app, result.id)["status"] == "SUCCESS"
        task = assert_agree(app, book, result.id)
        assert history(task) == ["start", "progress", "succeed"]
    finally:
        uninstall(app)
        close_result_backend(app)


def test_the_meta_outlives_the_books_record(namespace: str, book: RedisBook) -> None:
    """result_expires shorter than the book's retention: the meta is kept as long as the
    record (its resultRef never names a key that is gone)."""
    app = make_app(namespace, result_expires=5)
    install(app)
    try:
        with start_worker(app, perform_ping_check=False):
            done = app.tasks["b.ok"].delay(1)
            untracked = app.tasks["b.plain"].delay(1)
            assert (done.get(timeout=10), untracked.get(timeout=10)) == (1, 2)
        client = redis.Redis.from_url(URL)
        record_ttl = client.ttl(book.keys.task(done.id))
        meta_ttl = client.ttl(app.backend.get_key_for_task(done.id))  # type: ignore[attr-defined]
        plain_ttl = client.ttl(app.backend.get_key_for_task(untracked.id))  # type: ignore[attr-defined]
        client.close()
        assert 0 < record_ttl <= meta_ttl
        assert 0 < plain_ttl <= 5  # untracked: Celery's result_expires as it is
    finally:
        uninstall(app)
        close_result_backend(app)


APP_MODULE = """
from celery import Celery
from asyncbook.celery import install, report_progress

URL = {url!r}
app = Celery("{name}", broker=URL, backend="asyncbook+" + URL)
app.conf.update(
    task_default_queue={queue!r},
    asyncbook_namespace={namespace!r},
    asyncbook_queue={queue!r} + "-asyncbook",
    broker_connection_retry_on_startup=True,
    task_acks_late={acks_late!r},
    worker_prefetch_multiplier=1,
    result_expires=600,
    result_backend_transport_options={{"global_keyprefix": {namespace!r} + ":"}},
)
install(app)


@app.task(bind=True, shared=False, tracked=True, ttl=60, name="pf.ok")
def ok(self, n):
    report_progress(self, 50, cursor="half")
    return n


@app.task(shared=False, tracked=True, ttl=60, name="pf.boom")
def boom():
    raise ValueError("no luck")


@app.task(bind=True, shared=False, tracked=True, ttl=60, max_retries=2, name="pf.flaky")
def flaky(self, n):
    if self.request.retries == 0:
        raise self.retry(exc=ConnectionError("busy"), countdown=0.3)
    return n


@app.task(shared=False, name="pf.total")
def total(values):
    return sum(values)
"""


@pytest.mark.parametrize("acks_late", [True, False])
def test_a_prefork_worker(tmp_path: Path, namespace: str, acks_late: bool) -> None:
    name = unique("pfapp").replace("-", "_")
    queue = unique("pfq")
    path = tmp_path / f"{name}.py"
    path.write_text(
        textwrap.dedent(
            APP_MODULE.format(
                url=URL, name=name, queue=queue, namespace=namespace, acks_late=acks_late
            )
        )
    )
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    app: Celery = module.app
    log = tmp_path / "worker.log"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    command = [
        sys.executable, "-m", "celery", "-A", name, "worker", "--pool=prefork", "-c", "2",
        "-Q", queue, "-n", f"{unique('w')}@localhost", "--without-gossip",
        "--without-mingle", "--without-heartbeat", "-l", "info",
    ]  # fmt: skip
    book = RedisBook.from_url(URL, namespace=namespace)
    with log.open("wb") as out:
        worker = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=out, stderr=out)
    try:
        wait_for(lambda: b" ready." in log.read_bytes() or worker.poll() is not None, 30)
        assert worker.poll() is None, log.read_text()
        done = app.tasks["pf.ok"].delay(6)
        failed = app.tasks["pf.boom"].delay()
        retried = app.tasks["pf.flaky"].delay(8)
        chorded = chord(
            [app.tasks["pf.ok"].s(n) for n in range(20)], app.tasks["pf.total"].s()
        ).apply_async()
        assert done.get(timeout=20) == 6
        with pytest.raises(ValueError, match="no luck"):
            failed.get(timeout=20)
        assert retried.get(timeout=20) == 8
        assert chorded.get(timeout=30) == sum(range(20))
        for task_id in (done.id, failed.id, retried.id):
            assert_agree(app, book, task_id)
        assert history(assert_agree(app, book, done.id)) == ["start", "progress", "succeed"]
        assert history(assert_agree(app, book, retried.id)) == ["start", "fail", "start", "succeed"]
        parent: Any = chorded.parent
        assert parent is not None
        for member in parent.results:
            assert assert_agree(app, book, member.id).state is AsyncState.SUCCEEDED
        assert b"refused" not in log.read_bytes()
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        uninstall(app)
        # Closed here, not by the garbage collector in a later test (redis-py before 6 warns).
        close_result_backend(app)
        book.client.close()


# -- deferred creates: apply_async returns before the create is sent; the publishing
# process still reads its own writes, others see the task a round trip later, and a
# create that never lands is made by the worker from the message.


def lose_creates(app: Celery, monkeypatch: pytest.MonkeyPatch) -> list[CreateSpec]:
    """The publisher queues its creates and never sends them (as if killed at once)."""
    integration = installed(app)
    assert integration is not None
    creates = integration.publishing.deferred_creates()
    assert creates is not None
    lost: list[CreateSpec] = []
    monkeypatch.setattr(creates, "add", lost.append)
    return lost


def test_the_publisher_reads_its_own_deferred_create(app: Celery, book: RedisBook) -> None:
    published = app.tasks["b.ok"].apply_async((1,), headers={})
    task = book.get(published.id)  # same process: waits for the queued create
    assert task is not None
    assert task.state is AsyncState.QUEUED


def test_another_client_sees_the_task_a_moment_later(app: Celery, namespace: str) -> None:
    other = redis.Redis.from_url(URL)
    try:
        keys = RedisBook(other, namespace=namespace).keys
        published = app.tasks["b.ok"].delay(1)
        key = keys.task(published.id)
        began = time.monotonic()
        wait_for(lambda: other.exists(key), timeout=5, interval=0.001)
        assert time.monotonic() - began < 5
    finally:
        other.close()


def test_a_lost_create_is_made_by_the_worker(
    app: Celery, book: RedisBook, monkeypatch: pytest.MonkeyPatch
) -> None:
    lost = lose_creates(app, monkeypatch)
    with start_worker(app, perform_ping_check=False):
        before = time.time() * 1000
        result = app.tasks["b.ok"].delay(4)
        after = time.time() * 1000
        assert result.get(timeout=10) == 4
    assert [spec.id for spec in lost] == [result.id]
    task = assert_agree(app, book, result.id)
    assert history(task) == ["start", "progress", "succeed"]
    # The deadline the message carries (publish time + ttl 60 s), not the worker's now.
    assert before + 60_000 - 1 <= task.expires_at_ms <= after + 60_000 + 1


def test_a_lost_create_of_a_long_task_is_made_when_its_start_is_sent(
    app: Celery, book: RedisBook, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start is sent before the result (the task outlives flush_delay): the book
    answers "unknown", the worker creates the task from the message and sends it again."""
    lose_creates(app, monkeypatch)

    @app.task(bind=True, shared=False, tracked=True, ttl=60, name="b.slow")
    def slow(self: Any) -> str:
        deadline = time.monotonic() + 5
        while book.get(str(self.request.id)) is None:  # the worker created it
            assert time.monotonic() < deadline
            time.sleep(0.01)
        return "slow"

    with start_worker(app, perform_ping_check=False):
        result = slow.delay()
        running = wait_for(lambda: (t := book.get(result.id)) is not None and t, timeout=10)
        assert result.get(timeout=10) == "slow"
    task = assert_agree(app, book, result.id)
    assert history(task) == ["start", "succeed"]
    assert running.expires_at_ms == task.expires_at_ms


def test_a_lost_create_keeps_every_event_sent_before_it(
    app: Celery, book: RedisBook, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start and a progress report go out together and both meet "unknown": the task
    is created once and both are sent again, in order."""
    lose_creates(app, monkeypatch)

    @app.task(bind=True, shared=False, tracked=True, ttl=60, name="b.slow_progress")
    def slow_progress(self: Any) -> str:
        report_progress(self, 30, cursor="a third")
        deadline = time.monotonic() + 5
        while (t := book.get(str(self.request.id))) is None or t.progress != 30:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        return "done"

    with start_worker(app, perform_ping_check=False):
        result = slow_progress.delay()
        assert result.get(timeout=10) == "done"
    task = assert_agree(app, book, result.id)
    assert history(task) == ["start", "progress", "succeed"]
    assert book.last_cursor(result.id) == "a third"


# -- writes not waited for: an early-acked execution's call of execution.lua goes out at
# once and its answer is read later (``_late``), handled as a synchronous write's.


class Sends:
    """The task ids whose writes ``LateWrites.send`` sent without waiting, and those it
    handed back to be waited for."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.deferred: list[str] = []
        self.waited: list[str] = []
        original = LateWrites.send

        def send(late: LateWrites, fused: Any, write: Any, token: Any) -> bool:
            sent = original(late, fused, write, token)
            (self.deferred if sent else self.waited).append(write.task_id)
            return sent

        monkeypatch.setattr(LateWrites, "send", send)


def late_of(app: Celery) -> LateWrites:
    backend: Any = app.backend
    late: LateWrites | None = backend._late
    assert late is not None
    return late


def the_sender(app: Celery) -> Any:
    (sender,) = [sender for _fused, sender in late_of(app)._senders.values()]
    assert sender is not None
    return sender


def test_an_early_acked_execution_does_not_wait(
    app: Celery, book: RedisBook, monkeypatch: pytest.MonkeyPatch
) -> None:
    sends = Sends(monkeypatch)
    ok, boom, flaky = app.tasks["b.ok"], app.tasks["b.boom"], app.tasks["b.flaky"]
    with start_worker(app, perform_ping_check=False):
        done, failed, retried = ok.delay(3), boom.delay(), flaky.delay(6)
        assert done.get(timeout=10) == 3
        with pytest.raises(ValueError, match="no luck"):
            failed.get(timeout=10)
        assert retried.get(timeout=10) == 6
    assert set(sends.deferred) == {done.id, failed.id, retried.id}
    assert sends.deferred.count(retried.id) == 2  # its RETRY, then its SUCCESS
    assert not late_of(app).pending()
    assert history(assert_agree(app, book, done.id)) == ["start", "progress", "succeed"]
    assert assert_agree(app, book, failed.id).state is AsyncState.FAILED
    assert assert_agree(app, book, retried.id).state is AsyncState.SUCCEEDED


def test_a_refused_end_read_late_stores_the_books_verdict(
    app: Celery, book: RedisBook, monkeypatch: pytest.MonkeyPatch
) -> None:
    """execution.lua writes no meta for an end the book refuses: the verdict is written
    when the answer is read (here by the reader thread: nothing else is written)."""
    sends = Sends(monkeypatch)
    cancelled, late = app.tasks["b.cancelled"], app.tasks["b.late"]
    with start_worker(app, perform_ping_check=False):
        revoked = cancelled.delay()
        with pytest.raises(TaskRevokedError, match="not needed"):
            revoked.get(timeout=10)
        expired = late.delay()
        with pytest.raises(TaskExpired):
            expired.get(timeout=10)
    assert sends.deferred == [revoked.id, expired.id]
    assert assert_agree(app, book, revoked.id).state is AsyncState.CANCELLED
    assert assert_agree(app, book, expired.id).state is AsyncState.EXPIRED


def test_an_unknown_task_read_late_is_created_from_its_message(
    app: Celery, book: RedisBook, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The publisher's create never landed: the late answer says "unknown" once the
    execution is over, and the task is created from the message the write kept."""
    app.conf.asyncbook_flush_delay = 1.0  # the start rides with the result, unsent before
    lose_creates(app, monkeypatch)
    sends = Sends(monkeypatch)
    integration = installed(app)
    assert integration is not None
    # Only the creator the write kept can create it (the execution is over).
    monkeypatch.setattr(integration, "create_missing", lambda task_id: False)
    with start_worker(app, perform_ping_check=False):
        result = app.tasks["b.ok"].delay(8)
        assert result.get(timeout=10) == 8
    assert sends.deferred == [result.id]
    assert history(assert_agree(app, book, result.id)) == ["start", "progress", "succeed"]


def test_a_connection_lost_with_answers_unread_loses_nothing(
    app: Celery, book: RedisBook, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writes sent while the server holds them (CLIENT PAUSE), then their connection
    killed before they ran: each is written again, and the book and the metas agree."""
    monkeypatch.setattr(_late, "READ_AFTER", 0.5)
    sends = Sends(monkeypatch)
    handled: list[str] = []  # each write's answer is handled once (written again once)
    original = LateWrites._handle

    def handle(late: LateWrites, answered: list[tuple[Any, Any]]) -> None:
        handled.extend(token.item[0] for token, _answer in answered)
        original(late, answered)

    monkeypatch.setattr(LateWrites, "_handle", handle)
    ok = app.tasks["b.ok"]
    with start_worker(app, perform_ping_check=False):
        assert ok.delay(0).get(timeout=10) == 0  # the sender's connection open
        late_of(app).settle(block=True)
        sender = the_sender(app)
        connection = sender._pipe.connection()
        connection.send_command("CLIENT", "ID")
        connection_id = connection.read_response()
        client.client_pause(5000, all=False)  # writes wait
        try:
            results = [ok.delay(n) for n in (1, 2)]
            wait_for(lambda: len(sender) == 2, timeout=10, interval=0.005)
            client.client_kill_filter(_id=connection_id)
        finally:
            client.client_unpause()
        assert [result.get(timeout=10) for result in results] == [1, 2]
    assert sends.deferred[1:] == [results[0].id, results[1].id]
    late_of(app).settle(block=True)
    assert handled[1:] == [results[0].id, results[1].id]
    for result in results:
        task = assert_agree(app, book, result.id)
        assert history(task) == ["start", "progress", "succeed"]


def test_the_answers_left_are_read_when_the_worker_stops(
    app: Celery, book: RedisBook, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No reader thread in time and no next write: the worker's shutdown (a warm one
    sends ``worker_shutdown``; the test worker does not) reads the answer and writes
    the book's verdict."""
    monkeypatch.setattr(_late, "READ_AFTER", 60.0)
    cancelled = app.tasks["b.cancelled"]
    with start_worker(app, perform_ping_check=False) as worker:
        revoked = cancelled.delay()
        # (not by the book: a book of the namespace in this process reads the answers due)
        backend: Any = app.backend
        wait_for(lambda: backend._late is not None and backend._late.pending(), timeout=10)
        assert backend.client.get(backend.get_key_for_task(revoked.id)) is None  # no meta
    assert late_of(app).pending()
    signals.worker_shutdown.send(sender=worker)
    assert not late_of(app).pending()
    assert assert_agree(app, book, revoked.id).state is AsyncState.CANCELLED
    meta = stored_meta(app, revoked.id)
    assert meta["status"] == "REVOKED"
    assert str(meta["result"]) == "not needed"


def test_unread_answers_are_bounded(
    app: Celery, book: RedisBook, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``MAX_UNREAD`` answers unread, a write waits for the oldest first."""
    monkeypatch.setattr(_late, "MAX_UNREAD", 2)
    monkeypatch.setattr(_late, "READ_AFTER", 60.0)
    ok = app.tasks["b.ok"]
    unread: list[int] = []
    original = LateWrites._handle

    def handle(late: LateWrites, answered: list[tuple[Any, Any]]) -> None:
        unread.append(len(the_sender(app)))
        original(late, answered)

    monkeypatch.setattr(LateWrites, "_handle", handle)
    with start_worker(app, perform_ping_check=False):
        assert ok.delay(0).get(timeout=10) == 0
        client.client_pause(300, all=False)  # no answer arrives
        results = [ok.delay(n) for n in range(1, 6)]
        assert [result.get(timeout=10) for result in results] == [1, 2, 3, 4, 5]
    assert max(unread) <= 2
    for result in results:
        assert assert_agree(app, book, result.id).state is AsyncState.SUCCEEDED


def test_acks_late_and_chord_members_wait_for_their_write(
    app: Celery, book: RedisBook, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sends = Sends(monkeypatch)

    @app.task(shared=False, tracked=True, ttl=60, acks_late=True, name="b.acked_late")
    def acked_late(n: int) -> int:
        return n

    ok, total = app.tasks["b.ok"], app.tasks["b.total"]
    with start_worker(app, perform_ping_check=False):
        assert acked_late.delay(7).get(timeout=10) == 7
        chorded = chord([ok.s(n) for n in range(3)], total.s()).apply_async()
        wait_for(chorded.ready, timeout=30)
        assert chorded.get(timeout=5) == 3
    assert sends.deferred == []
    parent: Any = chorded.parent
    for member in parent.results:
        assert assert_agree(app, book, member.id).state is AsyncState.SUCCEEDED


def test_the_worker_process_reads_its_own_writes(
    app: Celery, book: RedisBook, client: redis.Redis
) -> None:
    """A ``task_success`` handler reading the meta (through the backend) finds the
    SUCCESS its write sent, even while Redis holds the write (CLIENT PAUSE WRITE)."""
    ok = app.tasks["b.ok"]
    seen: list[str] = []

    def on_success(sender: Any = None, **_: Any) -> None:
        seen.append(stored_meta(app, str(sender.request.id))["status"])

    signals.task_success.connect(on_success, weak=False)
    try:
        with start_worker(app, perform_ping_check=False):
            assert ok.delay(0).get(timeout=10) == 0
            client.client_pause(300, all=False)  # the next write waits in Redis
            assert ok.delay(1).get(timeout=10) == 1
    finally:
        signals.task_success.disconnect(on_success)
    assert seen == ["SUCCESS", "SUCCESS"]


def test_a_book_in_the_worker_process_reads_the_backends_unread_writes(
    app: Celery, book: RedisBook, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The publisher's create never landed and the write's answer ("unknown") is still
    unread: a book of the namespace in the worker's process reads it first, so it finds
    the task, created from its message and ended, not None."""
    monkeypatch.setattr(_late, "READ_AFTER", 60.0)  # no reader thread in time
    app.conf.asyncbook_flush_delay = 1.0  # the start rides with the result, unsent before
    lose_creates(app, monkeypatch)
    integration = installed(app)
    assert integration is not None
    monkeypatch.setattr(integration, "create_missing", lambda task_id: False)
    with start_worker(app, perform_ping_check=False):
        result = app.tasks["b.ok"].delay(8)
        backend: Any = app.backend
        wait_for(lambda: backend._late is not None and backend._late.pending(), timeout=10)
        task = book.get(result.id)
        assert task is not None
        assert task.state is AsyncState.SUCCEEDED
        assert not late_of(app).pending()
