"""The console's task info, recorded by the Celery integration: at publish (name, args,
kwargs, queue, parent), at start (worker) and at the end (times, exception, traceback)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery, Task
from celery.contrib.testing.worker import start_worker

from asyncbook import FailEvent, RedisBook, TaskInfo
from asyncbook._limits import ERROR_LIMIT, TASK_ID_LIMIT
from asyncbook.celery import install, uninstall

from ..support.celery import CELERY_URL as URL
from ..support.celery import MEMORY_BROKER, close_result_backend, unique, wait_for

pytestmark = [
    pytest.mark.redis,
    pytest.mark.timeout(90),
    pytest.mark.filterwarnings("ignore:Call to deprecated setex:DeprecationWarning"),
]


def make_app(namespace: str, **conf: Any) -> Celery:
    app = Celery(
        unique("info"), broker="memory://", backend=f"asyncbook+{URL}", set_as_current=False
    )
    app.conf.update(
        task_default_queue=unique("q"),
        broker_connection_retry_on_startup=True,
        **MEMORY_BROKER,
        worker_hijack_root_logger=False,
        asyncbook_namespace=namespace,
        asyncbook_flush_delay=0.005,
        result_backend_thread_safe=True,
        result_expires=600,
        result_backend_transport_options={"global_keyprefix": f"{namespace}:"},
        **conf,
    )

    @app.task(shared=False, tracked=True, ttl=60, name="info.generate")
    def generate(prompt: str, steps: int = 1, api_key: str = "") -> str:
        return prompt * steps

    @app.task(shared=False, tracked=True, ttl=60, name="info.boom")
    def boom(n: int) -> None:
        raise ValueError(f"no luck with {n}")

    @app.task(shared=False, tracked=True, ttl=60, name="info.huge")
    def huge(size: int) -> None:
        raise ValueError("o" * size)

    @app.task(bind=True, shared=False, tracked=True, ttl=60, name="info.parent")
    def parent(self: Task[Any, Any]) -> str:
        child = generate.apply_async(("child",))
        return str(child.id)

    return app


def run_app(app: Celery) -> Iterator[Celery]:
    install(app)
    with start_worker(app, perform_ping_check=False, pool="threads", concurrency=2):
        yield app
    uninstall(app)
    close_result_backend(app)
    app.close()


@pytest.fixture
def app(namespace: str) -> Iterator[Celery]:
    yield from run_app(make_app(namespace))


def ended_info(book: RedisBook, task_id: str) -> TaskInfo:
    def ended() -> TaskInfo | None:
        info = book.info(task_id)
        return info if info is not None and info.ended_at_ms is not None else None

    found: TaskInfo = wait_for(ended, timeout=20)
    return found


def test_a_succeeded_task_has_its_name_args_queue_worker_and_times(
    app: Celery, book: RedisBook
) -> None:
    result = app.tasks["info.generate"].apply_async(("hi",), {"steps": 2, "api_key": "s3cret"})
    assert result.get(timeout=20) == "hihi"
    info = ended_info(book, result.id)
    assert info.name == "info.generate"
    assert info.args_repr == "('hi',)"
    assert info.kwargs_repr == "{'steps': 2, 'api_key': '***'}"  # redacted by name
    assert info.queue == app.conf.task_default_queue
    assert info.worker  # the hostname the start event names
    assert info.created_at_ms is not None
    assert info.started_at_ms is not None
    assert info.created_at_ms <= info.started_at_ms <= (info.ended_at_ms or 0)
    assert info.runtime_ms == (info.ended_at_ms or 0) - info.started_at_ms
    assert info.retries == 0
    assert info.exception is None
    assert info.traceback is None
    # The seed's task shape is untouched by the info.
    task = book.get(result.id)
    assert task is not None
    assert set(task.model_dump(by_alias=True)) == {
        "id",
        "state",
        "expiresAtMs",
        "attempts",
        "maxAttempts",
        "progress",
        "version",
        "resultRef",
        "resultHash",
        "error",
        "history",
    }
    page = book.search(name="info.generate")
    assert [row.task.id for row in page.tasks] == [result.id]
    assert page.totals["succeeded"] == 1
    assert book.search(worker=info.worker).tasks[0].info.name == "info.generate"


def test_a_failure_keeps_its_exception_type_and_traceback(app: Celery, book: RedisBook) -> None:
    result = app.tasks["info.boom"].apply_async((7,))
    with pytest.raises(ValueError, match="no luck with 7"):
        result.get(timeout=20)
    info = ended_info(book, result.id)
    assert info.exception == "ValueError"
    assert info.traceback is not None
    assert "Traceback" in info.traceback
    assert "no luck with 7" in info.traceback
    stats = book.stats("info.boom", 3_600_000)
    assert stats.totals["failed"] == 1
    assert stats.failure_rate == 1.0


def test_a_child_names_its_parent_and_the_parent_lists_it(app: Celery, book: RedisBook) -> None:
    result = app.tasks["info.parent"].apply_async()
    child_id = result.get(timeout=20)
    child = ended_info(book, child_id)
    assert child.parent_id == result.id
    assert child.root_id == result.id
    parent = ended_info(book, result.id)
    assert parent.children == (child_id,)


def test_args_off_records_the_rest_and_info_off_records_nothing(
    namespace: str, book: RedisBook
) -> None:
    for app in run_app(make_app(namespace, asyncbook_record_args=False)):
        result = app.tasks["info.generate"].apply_async(("hi",))
        assert result.get(timeout=20) == "hi"
        info = ended_info(book, result.id)
        assert info.name == "info.generate"
        assert info.args_repr is None
        assert info.kwargs_repr is None
    for app in run_app(make_app(namespace, asyncbook_record_info=False)):
        result = app.tasks["info.generate"].apply_async(("hi",))
        assert result.get(timeout=20) == "hi"
        info = ended_info(book, result.id)
        assert info.name is None
        assert info.args_repr is None
        assert info.queue is None
        assert info.worker is not None  # the start event names its worker regardless


def test_a_huge_error_is_capped_with_a_marker_of_what_was_cut(app: Celery, book: RedisBook) -> None:
    """2,000,000 characters of error: the record, its history and the info keep at most
    ``ERROR_LIMIT`` of them, the start and how much was cut."""
    result = app.tasks["info.huge"].apply_async((2_000_000,))
    ended_info(book, result.id)
    task = book.get(result.id)
    assert task is not None
    assert task.error is not None
    assert len(task.error) <= ERROR_LIMIT
    whole = "ValueError: " + "o" * 2_000_000
    kept = task.error.index("…")
    assert task.error == whole[:kept] + f"…[cut {len(whole) - kept} characters]"
    (failed,) = [entry.event for entry in task.history if entry.event.type == "fail"]
    assert isinstance(failed, FailEvent)
    assert failed.error == task.error


def test_a_task_id_over_the_limit_is_published_untracked_with_an_error(
    app: Celery, book: RedisBook, caplog: pytest.LogCaptureFixture
) -> None:
    long_id = "l" * (TASK_ID_LIMIT + 1)
    with caplog.at_level(logging.ERROR, logger="asyncbook.celery"):
        result = app.tasks["info.generate"].apply_async(("hi",), task_id=long_id)
        assert result.get(timeout=20) == "hi"
    assert "taskId" in caplog.text
    assert "published untracked" in caplog.text
    assert book.get(long_id) is None
    assert sum(book.count_by_state().values()) == 0


@pytest.mark.parametrize("name", ["info.generate", "info.boom"])
def test_a_task_id_over_the_limit_is_said_once_and_its_end_is_not_refused(
    app: Celery, book: RedisBook, caplog: pytest.LogCaptureFixture, name: str
) -> None:
    # The publish said it goes untracked; the result backend's end of it writes only
    # Celery's result, instead of an event the book refuses with the whole id again.
    long_id = "l" * (TASK_ID_LIMIT + 1)
    with caplog.at_level(logging.WARNING, logger="asyncbook"):
        result = app.tasks[name].apply_async(
            ("hi",) if name == "info.generate" else (3,), task_id=long_id
        )
        result.get(timeout=20, propagate=False)
    assert result.state == ("SUCCESS" if name == "info.generate" else "FAILURE")
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("asyncbook")]
    assert len(messages) == 1, messages
    assert "published untracked" in messages[0]
    assert book.get(long_id) is None
