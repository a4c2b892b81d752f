"""Every cancel reaches Celery's result: with asyncbook's result backend, a tracked task
cancelled in any way (the CLI, the status server, ``cancel(app, id)``, Celery's revoke)
ends REVOKED, ``TaskRevokedError`` carrying the cancel's reason, whether it was running,
queued behind a busy worker, waiting between retries, or queued for a worker not up yet.

A real prefork worker (``-c 1``) of an app module written for the test, on the Celery
test Redis; Celery's metas under the namespace's own key prefix.
"""

from __future__ import annotations

import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from celery import Celery
from celery.exceptions import TaskRevokedError
from celery.result import AsyncResult

from asyncbook import RedisBook
from asyncbook.celery import cancel, uninstall
from asyncbook.web import BackgroundServer, feed_for

from ..support.books import delete_namespace
from ..support.celery import CELERY_URL as URL
from ..support.celery import CeleryWorker, close_result_backend, unique, wait_for
from ..support.cli import run

pytestmark = [
    pytest.mark.redis,
    pytest.mark.timeout(120),
    pytest.mark.filterwarnings("ignore:Call to deprecated setex:DeprecationWarning"),
]

APP_MODULE = """
import time

from celery import Celery
from asyncbook.celery import install, report_progress

app = Celery("{name}", broker={url!r}, backend="asyncbook+" + {url!r})
app.conf.update(
    task_default_queue={queue!r},
    asyncbook_namespace={namespace!r},
    asyncbook_queue={queue!r} + "-asyncbook",
    broker_connection_retry_on_startup=True,
    result_expires=600,
    result_backend_transport_options={{"global_keyprefix": {namespace!r} + ":"}},
)
install(app)


class Weird(Exception):
    def __init__(self, a, b):
        super().__init__(f"{{a}}/{{b}}")


@app.task(bind=True, shared=False, tracked=True, ttl=600, name="cr.slow")
def slow(self, chunks=40):
    for chunk in range(chunks):
        time.sleep(0.2)
        report_progress(self, min(99, chunk), cursor=str(chunk))
    return "done"


@app.task(bind=True, shared=False, tracked=True, ttl=600, max_retries=3, name="cr.flaky")
def flaky(self):
    raise self.retry(exc=ConnectionError("busy"), countdown=30)


@app.task(shared=False, tracked=True, ttl=600, name="cr.weird")
def weird():
    raise Weird("x", "y")
"""

REASONS = {
    "cli": "from the CLI",
    "http": "from the page",
    "python": "user left",
    "revoke": "revoked",  # Celery's own revoke gives no reason: the book's is "revoked"
}


@pytest.fixture(scope="module")
def namespace(client: redis.Redis) -> Iterator[str]:
    namespace = unique("cancel-results")
    yield namespace
    delete_namespace(client, namespace)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory, namespace: str) -> Path:
    """The app module (``cancel_results_app``), one queue of its own."""
    folder = tmp_path_factory.mktemp("cancel-results")
    source = APP_MODULE.format(name="cr", url=URL, queue=unique("cr-q"), namespace=namespace)
    (folder / "cancel_results_app.py").write_text(textwrap.dedent(source))
    return folder


@pytest.fixture(scope="module")
def app(folder: Path) -> Iterator[Celery]:
    import importlib.util

    path = folder / "cancel_results_app.py"
    spec = importlib.util.spec_from_file_location(unique("cr_app"), path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    app: Celery = module.app
    yield app
    uninstall(app)
    close_result_backend(app)


def worker_on(folder: Path, app: Celery, queue: str | None = None) -> CeleryWorker:
    worker = CeleryWorker(
        folder,
        URL,
        folder / f"{unique('worker')}.log",
        concurrency=1,
        app="cancel_results_app",
        extra=["-Q", queue or str(app.conf.task_default_queue)],
    )
    worker.start()
    return worker


@pytest.fixture(scope="module")
def worker(folder: Path, app: Celery) -> Iterator[CeleryWorker]:
    worker = worker_on(folder, app)
    yield worker
    worker.stop()


@pytest.fixture(scope="module")
def book(namespace: str) -> Iterator[RedisBook]:
    book = RedisBook.from_url(URL, namespace=namespace)
    yield book
    book.client.close()


@pytest.fixture(scope="module")
def server(book: RedisBook) -> Iterator[str]:
    """The status server on the worker's namespace (loopback, no token)."""
    server = BackgroundServer(book, feed_for(book))
    server.start()
    yield server.url.rstrip("/")
    server.stop()


def canceller(
    way: str, app: Celery, book: RedisBook, server: str
) -> Callable[[AsyncResult[Any]], None]:
    reason = REASONS[way]

    def by_cli(result: AsyncResult[Any]) -> None:
        ran = run(book, "cancel", result.id, "--reason", reason, url=URL)
        assert ran.exit_code == 0, ran.output

    def by_http(result: AsyncResult[Any]) -> None:
        answer = httpx.post(f"{server}/api/tasks/{result.id}/cancel", json={"reason": reason})
        assert answer.status_code == 200, answer.text

    def by_python(result: AsyncResult[Any]) -> None:
        assert cancel(app, result.id, reason=reason).reason == "cancelled"

    def by_revoke(result: AsyncResult[Any]) -> None:
        result.revoke()

    ways = {"cli": by_cli, "http": by_http, "python": by_python, "revoke": by_revoke}
    return ways[way]


def revoked_with(result: AsyncResult[Any], reason: str, timeout: float = 15.0) -> None:
    """Celery's result says REVOKED, with ``reason``; ``get()`` raises it."""
    with pytest.raises(TaskRevokedError) as raised:
        result.get(timeout=timeout)
    assert raised.value.args == (reason,)
    assert (str(result.state), result.result.args) == ("REVOKED", (reason,))


def running(book: RedisBook, task_id: str) -> None:
    def reported() -> bool:
        task = book.get(task_id)
        return task is not None and task.state == "running" and task.progress >= 2

    wait_for(reported, 15)


@pytest.mark.parametrize("way", list(REASONS))
def test_a_running_task_cancelled_any_way_reads_revoked_with_its_reason(
    app: Celery, book: RedisBook, worker: CeleryWorker, server: str, way: str
) -> None:
    result = app.tasks["cr.slow"].delay()
    running(book, result.id)
    canceller(way, app, book, server)(result)
    revoked_with(result, REASONS[way])
    task = book.get(result.id)
    assert task is not None
    assert (task.state, task.error) == ("cancelled", REASONS[way])
    assert b"refused" not in worker.log.read_bytes()


@pytest.mark.parametrize("way", list(REASONS))
def test_a_queued_task_cancelled_any_way_reads_revoked_with_its_reason(
    app: Celery, book: RedisBook, worker: CeleryWorker, server: str, way: str
) -> None:
    busy = app.tasks["cr.slow"].delay(8)
    running(book, busy.id)
    queued = app.tasks["cr.slow"].delay(1)  # behind it, on the worker's one process
    canceller(way, app, book, server)(queued)
    revoked_with(queued, REASONS[way], timeout=5.0)  # while the busy one still runs
    assert busy.get(timeout=15) == "done"
    assert str(AsyncResult(queued.id, app=app).state) == "REVOKED"
    # The worker's discard of a task a revoke had cancelled already is no refusal.
    assert b"refused" not in worker.log.read_bytes()


@pytest.mark.parametrize("way", ["cli", "python"])
def test_a_task_waiting_between_retries_reads_revoked_with_its_reason(
    app: Celery, book: RedisBook, worker: CeleryWorker, server: str, way: str
) -> None:
    result = app.tasks["cr.flaky"].delay()  # its next attempt is 30 s away
    wait_for(lambda: result.state == "RETRY", 15)
    canceller(way, app, book, server)(result)
    revoked_with(result, REASONS[way], timeout=5.0)


def test_a_task_no_worker_took_yet_reads_revoked_when_one_does(
    app: Celery, book: RedisBook, folder: Path, server: str
) -> None:
    queue = unique("cr-later")
    result = app.tasks["cr.slow"].apply_async((1,), queue=queue)
    wait_for(lambda: book.get(result.id) is not None, 5)
    canceller("cli", app, book, server)(result)
    time.sleep(0.5)
    assert result.state == "PENDING"  # nobody to say it yet: no worker consumes the queue
    later = worker_on(folder, app, queue)
    try:
        revoked_with(result, REASONS["cli"])
    finally:
        later.stop()


def test_an_unpicklable_exception_is_recorded_as_itself(
    app: Celery, book: RedisBook, worker: CeleryWorker
) -> None:
    result = app.tasks["cr.weird"].delay()
    wait_for(lambda: (task := book.get(result.id)) is not None and task.terminal, 15)
    task = book.get(result.id)
    assert task is not None
    assert (task.state, task.error) == ("failed", "Weird: x/y")


def test_an_unpicklable_exception_is_named_as_itself_in_the_info(
    app: Celery, book: RedisBook, worker: CeleryWorker
) -> None:
    result = app.tasks["cr.weird"].delay()
    wait_for(lambda: (info := book.info(result.id)) is not None and info.exception, 15)
    info = book.info(result.id)
    assert info is not None
    assert info.exception == "Weird"  # not Celery's UnpickleableExceptionWrapper
