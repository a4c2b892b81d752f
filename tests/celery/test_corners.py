"""Nothing lost at the edges of the Celery integration, in one process.

A message's own ``expires``, ignored results, settings given after ``install``, progress
from a helper thread, the beat tasks' queue, notification redelivery.
"""

from __future__ import annotations

import importlib
import logging
import sys
import textwrap
import threading
import time
import types
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from celery import Celery, Task, signals
from celery.exceptions import TaskRevokedError

from asyncbook import AsyncBookError, AsyncTask, MemoryBook, Notification, ProgressEvent, RedisBook
from asyncbook.celery import default_result_ref, install, report_progress, uninstall
from asyncbook.celery._integration import Integration
from asyncbook.celery._settings import Settings
from asyncbook.celery._tracking import now_ms

from ..support.books import fakeredis_book
from ..support.celery import (
    CELERY_VERSION,
    history,
    memory_app,
    threaded_worker,
    unique,
    wait_terminal,
)

PAIR = threading.Barrier(2)
"""Holds two executions of ``paired`` running at once."""


def make_app(backend: str | None = "cache+memory://", **conf: Any) -> Celery:
    app = memory_app("corners", backend, **conf)

    @app.task(bind=True, shared=False, tracked=True, ttl=30)
    def noop(self: Task[Any, Any]) -> str:
        return "done"

    @app.task(bind=True, shared=False, tracked=True)
    def untimed(self: Task[Any, Any]) -> str:
        return "done"

    @app.task(bind=True, shared=False, tracked=True, ttl=30, ignore_result=True)
    def forgetful(self: Task[Any, Any]) -> str:
        return "not kept"

    @app.task(bind=True, shared=False, tracked=True, ttl=30)
    def helped(self: Task[Any, Any]) -> str:
        helper = threading.Thread(target=report_progress, args=(self, 50), kwargs={"cursor": "h"})
        helper.start()
        helper.join()
        return "helped"

    @app.task(bind=True, shared=False, tracked=True, ttl=30)
    def paired(self: Task[Any, Any], name_it: bool) -> list[str]:
        PAIR.wait(timeout=10)  # both executions are running
        own_id = self.request.id
        refused: list[str] = []

        def helper() -> None:
            try:
                report_progress(self, 40, cursor="pair", task_id=own_id if name_it else None)
            except AsyncBookError as error:
                refused.append(str(error.field))

        thread = threading.Thread(target=helper)
        thread.start()
        thread.join()
        PAIR.wait(timeout=10)  # neither ends before both helpers reported
        return refused

    @app.task(bind=True, shared=False)
    def untracked(self: Task[Any, Any]) -> str:
        return "plain"

    return app


@pytest.fixture(scope="module")
def app() -> Celery:
    return make_app()


@pytest.fixture(scope="module")
def book() -> RedisBook:
    return fakeredis_book("corners")


@pytest.fixture(scope="module")
def integration(app: Celery, book: RedisBook) -> Iterator[Integration]:
    with threaded_worker(app, book) as integration:
        yield integration


def task_of(app: Celery, name: str) -> Task[Any, Any]:
    return app.tasks[f"tests.celery.test_corners.{name}"]


class Published:
    """The headers and routing keys of the messages published while it is connected."""

    def __init__(self) -> None:
        self.headers: dict[str, dict[str, Any]] = {}
        self.routing_keys: dict[str, str] = {}

    def __call__(
        self, headers: dict[str, Any] | None = None, routing_key: str = "", **_: Any
    ) -> None:
        if headers is not None:
            self.headers[str(headers["id"])] = dict(headers)
            self.routing_keys[str(headers["id"])] = routing_key

    def __enter__(self) -> Published:
        signals.before_task_publish.connect(self, weak=False)
        return self

    def __exit__(self, *_: object) -> None:
        signals.before_task_publish.disconnect(self)


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _ms(value: datetime) -> int:
    """ms since the epoch; a time without an offset is UTC."""
    aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return (aware - EPOCH) // timedelta(milliseconds=1)


def _in(seconds: float) -> datetime:
    """UTC, ``seconds`` from now, in whole milliseconds."""
    at = datetime.now(UTC) + timedelta(seconds=seconds)
    return at.replace(microsecond=at.microsecond // 1000 * 1000)


# -- 1. a message's own expires -------------------------------------------------------


@pytest.mark.parametrize("kind", ["seconds", "aware", "naive"])
def test_an_earlier_expires_is_the_deadline_and_stays_as_given(
    app: Celery, book: RedisBook, integration: Integration, kind: str
) -> None:
    at = _in(5)
    expires: Any = {"seconds": 5.0, "aware": at, "naive": at.replace(tzinfo=None)}[kind]
    with Published() as published:
        before = now_ms()
        result = task_of(app, "noop").apply_async(expires=expires)
    header = published.headers[result.id]["expires"]
    task = book.get(result.id)
    assert task is not None
    # The book's deadline is the message's expires (the ttl, 30 s, is later) ...
    if kind == "seconds":
        assert before + 4_900 <= task.expires_at_ms <= now_ms() + 5_000
    else:
        assert task.expires_at_ms == _ms(at)
    # ... and the message keeps its own expires, as Celery wrote it.
    if kind == "naive":
        assert header == at.replace(tzinfo=None).isoformat()
    assert _ms(datetime.fromisoformat(header)) == task.expires_at_ms
    assert result.get(timeout=10) == "done"


def test_expires_is_read_as_celerys_worker_reads_it_in_any_app_timezone() -> None:
    # Celery's worker reads a time without offset as UTC, whatever app.timezone says
    # (celery.utils.time.maybe_make_aware); seconds become a time in app.timezone.
    app = make_app(timezone="America/New_York", enable_utc=False)
    book = MemoryBook()
    install(app, book)
    try:
        at = _in(5)
        naive = task_of(app, "noop").apply_async(expires=at.replace(tzinfo=None))
        before = now_ms()
        seconds = task_of(app, "noop").apply_async(expires=5)
        tasks = [book.get(naive.id), book.get(seconds.id)]
        assert tasks[0] is not None
        assert tasks[1] is not None
        assert tasks[0].expires_at_ms == _ms(at)
        assert before + 4_900 <= tasks[1].expires_at_ms <= now_ms() + 5_000
    finally:
        uninstall(app)


@pytest.mark.parametrize("kind", ["seconds", "naive"])
def test_a_later_expires_is_brought_forward_to_the_deadline(
    app: Celery, book: RedisBook, integration: Integration, kind: str
) -> None:
    later = _in(300).replace(tzinfo=None)
    with Published() as published:
        result = task_of(app, "noop").apply_async(expires=120 if kind == "seconds" else later)
    task = book.get(result.id)
    assert task is not None
    header = datetime.fromisoformat(published.headers[result.id]["expires"])
    assert _ms(header) == task.expires_at_ms  # the ttl's deadline, 30 s: earlier
    assert result.get(timeout=10) == "done"


@pytest.mark.parametrize("task_name", ["noop", "untracked"])
def test_a_naive_expires_expires_the_message_as_without_asyncbook(
    app: Celery, book: RedisBook, integration: Integration, task_name: str
) -> None:
    # Celery's own test_expired, with datetime.utcnow(): a time without offset is UTC.
    expires = _in(0.1).replace(tzinfo=None)
    result = task_of(app, task_name).apply_async(countdown=0.3, expires=expires)
    with pytest.raises(TaskRevokedError):
        result.get(timeout=10)
    assert str(result.state) == "REVOKED"
    if task_name == "noop":
        task = wait_terminal(book, result.id)
        assert (task.state, history(task)) == ("expired", ["expire"])
        # Expired at the message's expires, not up to a ttl later.
        assert task.history[0].event.at_ms == _ms(expires)


def test_a_publisher_without_asyncbook_bounds_the_task_by_its_expires(
    app: Celery, book: RedisBook, integration: Integration
) -> None:
    client = Celery("plain-client", broker="memory://", backend="cache+memory://")
    client.conf.broker_connection_retry_on_startup = True
    before = now_ms()
    result = client.send_task(
        "tests.celery.test_corners.noop", queue=app.conf.task_default_queue, expires=5
    )
    task = wait_terminal(book, result.id)
    assert task.state == "succeeded"
    assert before + 4_900 <= task.expires_at_ms <= now_ms() + 5_000  # not now + 30 s


# -- 2. ignored results ---------------------------------------------------------------


def test_an_ignored_result_is_named_as_such(
    app: Celery, book: RedisBook, integration: Integration
) -> None:
    forgotten = task_of(app, "forgetful").delay()
    by_call = task_of(app, "noop").apply_async(ignore_result=True)
    kept = task_of(app, "noop").delay()
    for result, ref in [
        (forgotten, f"ignored:{forgotten.id}"),
        (by_call, f"ignored:{by_call.id}"),
        (kept, f"celery-task-meta-{kept.id}"),
    ]:
        task = wait_terminal(book, result.id)
        assert (task.state, task.result_ref) == ("succeeded", ref)
    backend: Any = app.backend
    assert backend.get(backend.get_key_for_task(kept.id)) is not None
    for result in (forgotten, by_call):
        assert backend.get(backend.get_key_for_task(result.id)) is None  # never written


def _ref(app: Celery, name: str, **request: Any) -> str:
    task = app.tasks[f"tests.celery.test_corners.{name}"]
    task.push_request(id="t-1", **request)
    try:
        return default_result_ref(task, "t-1", "value")
    finally:
        task.pop_request()


def test_default_result_ref_names_a_key_only_where_one_is_written() -> None:
    cache = make_app()
    assert _ref(cache, "noop") == "celery-task-meta-t-1"
    assert _ref(cache, "noop", ignore_result=True) == "ignored:t-1"
    assert _ref(cache, "forgetful") == "ignored:t-1"
    # From Celery 5.6 a call's ignore_result overrides the task's (get_actual_ignore_result in
    # the tracer); 5.5's tracer reads the task's alone and keeps no result.
    overridden = "celery-task-meta-t-1" if CELERY_VERSION >= (5, 6) else "ignored:t-1"
    assert _ref(cache, "forgetful", ignore_result=False) == overridden
    assert _ref(cache, "noop", is_eager=True) == "ignored:t-1"  # eager results are not kept
    stored_eager = make_app(task_store_eager_result=True)
    assert _ref(stored_eager, "noop", is_eager=True) == "celery-task-meta-t-1"
    assert _ref(make_app(backend=None), "noop") == "ignored:t-1"  # no result backend
    assert _ref(make_app(backend="rpc://"), "noop") == "celery:t-1"  # a message, no key


def test_store_errors_even_if_ignored_keeps_a_success_ignored() -> None:
    app = make_app(task_store_errors_even_if_ignored=True)
    assert _ref(app, "forgetful") == "ignored:t-1"


# -- 3. settings and sinks read when first needed ----------------------------------------


def test_settings_given_after_install_are_used(caplog: pytest.LogCaptureFixture) -> None:
    app = make_app()
    book = MemoryBook()
    integration = install(app, book)
    try:
        app.config_from_object(
            types.SimpleNamespace(
                broker_url="memory://",
                task_default_queue=unique("q"),
                asyncbook_default_ttl=7,
                asyncbook_sweep_batch=5,
                asyncbook_flush_dealy=1,
            )
        )
        with caplog.at_level(logging.WARNING, "asyncbook.celery"):
            before = now_ms()
            result = task_of(app, "untimed").delay()
        assert (integration.settings.default_ttl_ms, integration.settings.sweep_batch) == (7000, 5)
        task = book.get(result.id)
        assert task is not None
        assert before + 7_000 <= task.expires_at_ms <= now_ms() + 7_000
        assert "asyncbook_flush_dealy" in caplog.text  # warned when first read
    finally:
        uninstall(app)


def test_settings_are_read_once_by_many_threads_at_first_use(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads: list[int] = []
    real = Settings.from_conf.__func__  # type: ignore[attr-defined]

    def slow_read(cls: type[Settings], conf: Any) -> Settings:
        reads.append(1)
        time.sleep(0.05)  # widen the window in which another thread could read too
        settings: Settings = real(cls, conf)
        return settings

    monkeypatch.setattr(Settings, "from_conf", classmethod(slow_read))
    app = make_app()
    integration = install(app, MemoryBook())
    try:
        assert reads == []  # install reads nothing
        start = threading.Barrier(8)
        seen: list[Settings] = []

        def first_use() -> None:
            start.wait(timeout=5)
            seen.append(integration.settings)

        threads = [threading.Thread(target=first_use) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert reads == [1]
        assert len(seen) == 8
        assert all(settings is seen[0] for settings in seen)
    finally:
        uninstall(app)


SINK_MODULE = """
    from celery import Celery

    from asyncbook import MemoryBook
    from asyncbook.celery import install

    app = Celery("{name}", broker="memory://", set_as_current=False)
    app.conf.asyncbook_sinks = ["{name}:notify"]
    app.conf.asyncbook_result_ref = "{name}:where"
    integration = install(app, MemoryBook())

    GOT = []


    def notify(note):
        GOT.append(note)


    def where(task, task_id, result):
        return "s3://" + task_id
"""


def test_a_sink_defined_below_install_in_the_same_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = unique("sinkmod").replace("-", "_")
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(SINK_MODULE.format(name=name)))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        module = importlib.import_module(name)  # install resolves nothing: no failure
        integration: Integration = module.integration
        book = integration.book
        book.create(id="n-1", now_ms=0, ttl_ms=10, max_attempts=1)
        book.expire("n-1")
        assert integration.deliver().delivered == 1
        assert [note.task_id for note in module.GOT] == ["n-1"]
        cleanup = module.app.tasks["celery.backend_cleanup"]
        assert integration.result_ref(cleanup, "r", None) == "s3://r"
        uninstall(module.app)
    finally:
        sys.modules.pop(name, None)


# -- 4. progress from another thread of the task ----------------------------------------


def cursor(task: AsyncTask) -> str:
    """The cursor of the task's last progress event."""
    return [e.event.cursor for e in task.history if isinstance(e.event, ProgressEvent)][-1]


def test_progress_from_a_helper_thread_is_recorded(
    app: Celery, book: RedisBook, integration: Integration
) -> None:
    result = task_of(app, "helped").delay()
    assert result.get(timeout=10) == "helped"
    task = wait_terminal(book, result.id)
    assert history(task) == ["start", "progress", "succeed"]
    (event,) = [e.event for e in task.history if isinstance(e.event, ProgressEvent)]
    assert (event.progress, event.cursor) == (50, "h")


def test_progress_from_a_helper_thread_when_several_run(
    app: Celery, book: RedisBook, integration: Integration
) -> None:
    anonymous = [task_of(app, "paired").delay(False) for _ in range(2)]
    assert [result.get(timeout=20) for result in anonymous] == [["task_id"], ["task_id"]]
    for result in anonymous:
        assert history(wait_terminal(book, result.id)) == ["start", "succeed"]
    named = [task_of(app, "paired").delay(True) for _ in range(2)]
    assert [result.get(timeout=20) for result in named] == [[], []]
    for result in named:
        task = wait_terminal(book, result.id)
        assert (history(task), cursor(task)) == (["start", "progress", "succeed"], "pair")


def test_progress_outside_any_execution_does_nothing(
    app: Celery, book: RedisBook, integration: Integration
) -> None:
    report_progress(task_of(app, "helped"), 10)  # nothing of it runs here: no-op
    report_progress(task_of(app, "helped"), 10, task_id="not-running")


def test_a_forked_process_does_not_inherit_a_held_lock() -> None:
    app = make_app()
    integration = install(app, MemoryBook())
    try:
        process = integration.running.process
        process.lock.acquire()  # held by another thread at the fork ...
        process.pid = -1  # ... and this is the child
        done = threading.Event()

        def report() -> None:
            report_progress(task_of(app, "helped"), 10)
            done.set()

        threading.Thread(target=report, daemon=True).start()
        assert done.wait(timeout=5)
    finally:
        uninstall(app)


# -- 5. the beat tasks' own queue ------------------------------------------------------


def _queue_of(app: Celery, name: str) -> str:
    route = app.amqp.router.route({}, name)
    return str(route["queue"].name)


def test_beat_tasks_go_to_their_own_queue() -> None:
    app = make_app()
    install(app, MemoryBook())
    try:
        assert _queue_of(app, "asyncbook.sweep") == "asyncbook"
        assert _queue_of(app, "asyncbook.deliver") == "asyncbook"
        assert _queue_of(app, "tests.celery.test_corners.noop") == app.conf.task_default_queue
        with Published() as published:
            app.send_task("asyncbook.sweep")  # by name, as a beat without the task sends it
            app.tasks["asyncbook.deliver"].delay()
        assert list(published.routing_keys.values()) == ["asyncbook", "asyncbook"]
    finally:
        uninstall(app)
    assert _queue_of(make_app(), "asyncbook.sweep") != "asyncbook"


def test_the_apps_own_routes_win_and_survive_a_later_configuration() -> None:
    app = make_app()
    install(app, MemoryBook())
    try:
        assert app.conf.task_default_queue  # the app is configured ...
        app.config_from_object(  # ... and configured again
            types.SimpleNamespace(
                task_routes=[{"asyncbook.deliver": "mail", "tests.*": "work"}],
                asyncbook_queue="house",
            )
        )
        assert _queue_of(app, "asyncbook.deliver") == "mail"  # yours, first
        assert _queue_of(app, "asyncbook.sweep") == "house"  # asyncbook's, last
        assert _queue_of(app, "tests.celery.test_corners.noop") == "work"
    finally:
        uninstall(app)
    assert app.conf.task_routes == ({"asyncbook.deliver": "mail", "tests.*": "work"},)


def test_a_worker_without_q_consumes_the_asyncbook_queue() -> None:
    app = make_app()
    integration = install(app, MemoryBook())
    try:
        worker = types.SimpleNamespace(app=app)
        integration.service.on_celeryd_init(instance=worker, options={"queues": None})
        assert "asyncbook" in app.amqp.queues.consume_from
        other = make_app()
        integration.service.on_celeryd_init(instance=types.SimpleNamespace(app=other), options={})
        assert "asyncbook" not in other.amqp.queues.consume_from  # another app's worker
    finally:
        uninstall(app)
    app = make_app()
    integration = install(app, MemoryBook())
    try:
        app.amqp.queues.select(["mine"])  # celery worker -Q mine
        integration.service.on_celeryd_init(
            instance=types.SimpleNamespace(app=app), options={"queues": ["mine"]}
        )
        assert list(app.amqp.queues.consume_from) == ["mine"]
    finally:
        uninstall(app)


def ours(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name == "asyncbook.celery"]


def test_worker_ready_warns_when_nothing_consumes_the_asyncbook_queue(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = make_app()
    book = MemoryBook()
    integration = install(app, book)
    consumer = types.SimpleNamespace(app=app, hostname="w@host")
    try:
        app.amqp.queues.select(["mine"])  # celery worker -Q mine
        with caplog.at_level(logging.INFO, "asyncbook.celery"):
            integration.service.on_worker_ready(sender=consumer)  # it sweeps itself: nothing to say
        assert ours(caplog) == []
    finally:
        uninstall(app)
    app = make_app()
    app.conf.asyncbook_worker_sweep = False  # the sweep is left to beat and the queue
    integration = install(app, book)
    consumer = types.SimpleNamespace(app=app, hostname="w@host")
    try:
        app.amqp.queues.select(["mine"])  # celery worker -Q mine
        with caplog.at_level(logging.INFO, "asyncbook.celery"):
            integration.service.on_worker_ready(sender=consumer)  # nothing overdue: a note
        assert [r.levelno for r in ours(caplog)] == [logging.INFO]
        assert "queue 'asyncbook'" in caplog.text
        caplog.clear()
        book.create(id="late", now_ms=now_ms() - 60_000, ttl_ms=1_000, max_attempts=1)
        with caplog.at_level(logging.INFO, "asyncbook.celery"):
            integration.service.on_worker_ready(sender=consumer)  # no sweep lately: a warning
        (record,) = ours(caplog)
        assert record.levelno == logging.WARNING
        assert "does not consume queue 'asyncbook'" in record.getMessage()
        caplog.clear()
        app.amqp.queues.select(["mine", "asyncbook"])  # celery worker -Q mine,asyncbook
        with caplog.at_level(logging.INFO, "asyncbook.celery"):
            integration.service.on_worker_ready(sender=consumer)
        assert ours(caplog) == []
    finally:
        uninstall(app)


# -- 7. redelivery of notifications ------------------------------------------------------


def test_redelivery_idle_is_how_long_another_consumer_waits() -> None:
    calls: list[Notification] = []

    def flaky_sink(note: Notification) -> None:
        calls.append(note)
        if len(calls) == 1:
            raise ConnectionError("receiver down")

    app = make_app(asyncbook_sinks=[flaky_sink], asyncbook_redelivery_idle=0.3)
    book = fakeredis_book("redeliver")
    integration = install(app, book)
    try:
        book.create(id="r-1", now_ms=0, ttl_ms=10, max_attempts=1)
        book.expire("r-1")
        assert integration.deliver(consumer="a").failed == 1  # taken by a, not acknowledged
        assert integration.deliver(consumer="b").delivered == 0  # not idle long enough
        time.sleep(0.4)
        assert integration.deliver(consumer="b").delivered == 1
        assert [note.task_id for note in calls] == ["r-1", "r-1"]
    finally:
        uninstall(app)
