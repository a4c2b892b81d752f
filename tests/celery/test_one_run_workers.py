"""One run per task, end to end: a real prefork worker on a real Redis broker whose
``visibility_timeout`` is 2 s hands a long ``acks_late`` task, and a countdown task
waiting for its ETA, to a second consumer while the first still holds it. Each task's
body counts its runs (a Redis INCR). Tracked, each runs once: the second delivery is
acknowledged, audited and not run, and Celery's result is the first run's. The same
tasks untracked (and tracked with ``one_run=False``) run at least twice.

kombu 5.7 looks for messages to restore every ``unacked_restore_interval`` times
``unacked_restore_throttle`` seconds (100 by default): the app sets both low, as a
deployment with a short visibility timeout would; earlier kombus ignore them.
"""

from __future__ import annotations

import importlib.util
import textwrap
import time
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from types import ModuleType

import pytest
import redis

from asyncbook import AuditEntry, RedisBook
from asyncbook.celery import uninstall

from ..support.books import delete_namespace
from ..support.celery import CELERY_URL as URL
from ..support.celery import CeleryWorker, close_result_backend, history, unique, wait_for

KOMBU = tuple(int(part) for part in version("kombu").split(".")[:2])

pytestmark = [
    pytest.mark.redis,
    pytest.mark.timeout(180),
    # The redelivery these tests need comes from kombu 5.7's unacked_restore_interval;
    # kombu 5.5 restores a worker's unacked messages on no such short clock (the Celery
    # 5.5 leg: the untracked task was not delivered again within 30 s).
    pytest.mark.skipif(KOMBU < (5, 7), reason="needs kombu 5.7's unacked_restore_interval"),
    pytest.mark.filterwarnings("ignore:Call to deprecated setex:DeprecationWarning"),
]

APP_MODULE = """
import time

import redis
from celery import Celery

from asyncbook.celery import install

app = Celery("one_run", broker={url!r}, backend="asyncbook+" + {url!r})
app.conf.update(
    task_default_queue={queue!r},
    asyncbook_namespace={namespace!r},
    asyncbook_one_run=True,
    asyncbook_queue={queue!r} + "-asyncbook",
    broker_connection_retry_on_startup=True,
    broker_transport_options={{
        "visibility_timeout": 2,
        "unacked_restore_interval": 0.5,
        "unacked_restore_throttle": 1,
    }},
    worker_prefetch_multiplier=1,
    result_expires=600,
    result_backend_transport_options={{"global_keyprefix": {namespace!r} + ":"}},
)
install(app)
counts = redis.Redis.from_url({url!r})


def body(key, seconds):
    counts.incr(key)  # the side effect a second run would repeat
    time.sleep(seconds)
    return "ran"


@app.task(shared=False, tracked=True, ttl=600, acks_late=True, name="one.late")
def late(key, seconds):
    return body(key, seconds)


@app.task(shared=False, acks_late=True, name="one.late_untracked")
def late_untracked(key, seconds):
    return body(key, seconds)


@app.task(
    shared=False, tracked=True, ttl=600, acks_late=True, one_run=False, name="one.late_opted_out"
)
def late_opted_out(key, seconds):
    return body(key, seconds)


@app.task(shared=False, tracked=True, ttl=600, name="one.eta")
def eta(key, seconds):
    return body(key, seconds)


@app.task(shared=False, name="one.eta_untracked")
def eta_untracked(key, seconds):
    return body(key, seconds)
"""


@pytest.fixture
def namespace(client: redis.Redis) -> Iterator[str]:
    namespace = unique("one-run")
    yield namespace
    delete_namespace(client, namespace)


@pytest.fixture
def app_module(tmp_path: Path, namespace: str, client: redis.Redis) -> Iterator[ModuleType]:
    """The app module (``one_run_app``) loaded here too, to publish (installed)."""
    queue = unique("one-q")
    source = APP_MODULE.format(url=URL, queue=queue, namespace=namespace)
    path = tmp_path / "one_run_app.py"
    path.write_text(textwrap.dedent(source))
    spec = importlib.util.spec_from_file_location(unique("one_run_app"), path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    uninstall(module.app)
    close_result_backend(module.app)
    for key in client.scan_iter(match=f"*{queue}*"):
        client.delete(key)


@pytest.fixture
def worker(tmp_path: Path, app_module: ModuleType, client: redis.Redis) -> Iterator[CeleryWorker]:
    worker = CeleryWorker(
        tmp_path,
        URL,
        tmp_path / "worker.log",
        concurrency=6,
        app="one_run_app",
        extra=["-Q", str(app_module.app.conf.task_default_queue)],
    )
    worker.start()
    yield worker
    worker.stop()


def runs(client: redis.Redis, key: str) -> int:
    return int(client.get(key) or 0)


def check_once(module: ModuleType, client: redis.Redis, namespace: str, task_id: str) -> None:
    """The tracked task ran once, its result is that run's, and the book audited the
    deliveries it did not run."""
    key = f"{namespace}:runs:{task_id}"
    assert runs(client, key) == 1
    assert module.app.AsyncResult(task_id).get(timeout=5) == "ran"
    book = RedisBook.from_url(URL, namespace=namespace)
    try:
        task = book.get(task_id)
        assert task is not None
        assert (task.state, history(task)) == ("succeeded", ["start", "succeed"])
        entries = book.audit(task_id)
        assert entries, "no suppressed delivery was recorded"
        assert {(e.action, e.outcome) for e in entries} <= {
            ("suppress", "held"),
            ("suppress", "terminal-conflict"),
        }
    finally:
        book.client.close()


def test_a_long_acks_late_task_runs_once_tracked_and_twice_untracked(
    app_module: ModuleType, worker: CeleryWorker, client: redis.Redis, namespace: str
) -> None:
    ids = {}
    for name in ("late", "late_untracked", "late_opted_out"):
        task_id = unique(name)
        ids[name] = task_id
        getattr(app_module, name).apply_async((f"{namespace}:runs:{task_id}", 5), task_id=task_id)
    keys = {name: f"{namespace}:runs:{task_id}" for name, task_id in ids.items()}
    # The copies the broker restored after 2 s run beside the first runs, or not at all.
    wait_for(lambda: runs(client, keys["late_untracked"]) >= 2, timeout=30)
    wait_for(lambda: runs(client, keys["late_opted_out"]) >= 2, timeout=30)
    assert app_module.app.AsyncResult(ids["late"]).get(timeout=30) == "ran"
    time.sleep(3)  # a copy restored late would have started by now
    check_once(app_module, client, namespace, ids["late"])
    assert {e.outcome for e in _audit(namespace, ids["late"])} == {"held"}


def _audit(namespace: str, task_id: str) -> list[AuditEntry]:
    book = RedisBook.from_url(URL, namespace=namespace)
    try:
        return list(book.audit(task_id))
    finally:
        book.client.close()


@pytest.mark.long
def test_the_issues_cases_a_10_s_task_and_a_30_s_countdown_run_once(
    app_module: ModuleType, worker: CeleryWorker, client: redis.Redis, namespace: str
) -> None:
    """The issue's test: a 10 s tracked task and a 30 s countdown task each run exactly
    once with asyncbook; the same tasks untracked run twice (or more)."""
    ids: dict[str, str] = {}
    for name, seconds, countdown in (
        ("late", 10, None),
        ("late_untracked", 10, None),
        ("eta", 2, 30),
        ("eta_untracked", 2, 30),
    ):
        ids[name] = task_id = unique(name)
        getattr(app_module, name).apply_async(
            (f"{namespace}:runs:{task_id}", seconds), task_id=task_id, countdown=countdown
        )
    keys = {name: f"{namespace}:runs:{task_id}" for name, task_id in ids.items()}
    wait_for(lambda: runs(client, keys["late_untracked"]) >= 2, timeout=40)
    assert app_module.app.AsyncResult(ids["late"]).get(timeout=40) == "ran"
    wait_for(lambda: runs(client, keys["eta_untracked"]) >= 2, timeout=60)
    assert app_module.app.AsyncResult(ids["eta"]).get(timeout=60) == "ran"
    time.sleep(4)
    check_once(app_module, client, namespace, ids["late"])
    check_once(app_module, client, namespace, ids["eta"])
