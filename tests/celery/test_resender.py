"""Retry end to end: a tracked task published with ``asyncbook_keep_messages`` fails in a
real ``celery -A workers worker``; ``POST /api/tasks/<id>/resend`` sends its kept message
again, and the new task runs with exactly the original's arguments, on its queue."""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from celery import Celery

from asyncbook import RedisBook
from asyncbook._kept import KeptMessage
from asyncbook.celery import Resender, install, installed, uninstall
from asyncbook.redis import claim_resends
from asyncbook.web import BackgroundServer, feed_for

from ..support import ROOT
from ..support.at_rest import values_at_rest
from ..support.books import delete_namespace
from ..support.celery import CELERY_URL as URL
from ..support.celery import CeleryWorker, example_app, memory_app, unique, wait_terminal

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]

ARGS = ("ünï ☃", [1, {"a": [2.5, None, True]}], "")
KWARGS = {"options": {"é": ["x", 3], "deep": {"er": [[], {}]}}, "n": -7}


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CeleryWorker]:
    worker = CeleryWorker(ROOT, URL, tmp_path_factory.mktemp("retry") / "worker.log")
    worker.start()
    yield worker
    worker.stop()
    client = redis.Redis.from_url(URL)
    delete_namespace(client, worker.namespace)
    client.close()


@pytest.fixture
def app(worker: CeleryWorker) -> Iterator[Celery]:
    """The example app publishing to the worker's queue, keeping each tracked message."""
    import workers

    workers.app.conf.update(asyncbook_keep_messages=True)
    try:
        with example_app(worker.queue, worker.namespace) as app:
            yield app
    finally:
        workers.app.conf.update(asyncbook_keep_messages=False)


@pytest.fixture
def book(worker: CeleryWorker) -> RedisBook:
    return RedisBook.from_url(URL, namespace=worker.namespace)


@pytest.fixture
def api(book: RedisBook) -> Iterator[httpx.Client]:
    resender = Resender(book, URL)
    with (
        BackgroundServer(book, feed_for(book), resender=resender) as server,
        httpx.Client(base_url=server.url, timeout=20) as client,
    ):
        yield client


def runs(log_key: str) -> list[dict[str, Any]]:
    client = redis.Redis.from_url(URL)
    try:
        return [json.loads(entry) for entry in client.lrange(log_key, 0, -1)]
    finally:
        client.delete(log_key)
        client.close()


def test_a_retried_task_runs_again_with_exactly_its_arguments_on_its_queue(
    app: Celery, book: RedisBook, api: httpx.Client, worker: CeleryWorker, tmp_path: Path
) -> None:
    import workers

    log_key = unique("retry-log")
    first = workers.tasks.run_twice.apply_async((log_key, *ARGS), KWARGS)
    assert wait_terminal(book, first.id).state.value == "failed"

    answer = api.post(f"/api/tasks/{first.id}/resend", json={"reason": "flaky upstream"})
    assert answer.status_code == 200, answer.text
    new_id = answer.json()["retriedAs"]
    assert answer.json() == {"taskId": first.id, "retriedAs": new_id, "code": None, "message": None}

    assert wait_terminal(book, new_id).state.value == "succeeded", worker.output()
    original, again = runs(log_key)
    assert again["id"] == new_id
    assert again["args"] == original["args"] == [*ARGS]  # JSON: the tuple arrives as a list
    assert again["kwargs"] == original["kwargs"] == KWARGS
    assert again["queue"] == original["queue"] == worker.queue
    # Linked both ways, with the reason; the new task is its own root.
    old_info, new_info = book.info(first.id), book.info(new_id)
    assert old_info is not None
    assert new_info is not None
    assert old_info.retried_as == new_id
    assert (new_info.retry_of, new_info.retry_reason) == (first.id, "flaky upstream")
    assert (new_info.name, new_info.root_id, new_info.parent_id) == (
        "workers.tasks.run_twice",
        new_id,
        None,
    )
    # A second retry of the same task is refused, naming the first.
    again_answer = api.post(f"/api/tasks/{first.id}/resend")
    assert again_answer.status_code == 409
    assert again_answer.json()["code"] == "already-retried"
    assert again_answer.json()["retriedAs"] == new_id


def test_a_message_over_the_limit_is_not_kept_and_a_retry_says_why(
    namespace: str, client: redis.Redis
) -> None:
    """In process, on a memory broker: a message over ``asyncbook_keep_message_limit`` is
    not kept (its size is); a small one is, with its body as serialized."""
    app = memory_app("keep", asyncbook_keep_messages=True, asyncbook_keep_message_limit=2048)

    @app.task(tracked=True, shared=False, name="keep.echo")
    def echo(text: str) -> str:
        return text

    book = RedisBook.from_url(URL, namespace=namespace)
    install(app, book)
    try:
        small, large = echo.delay("ünï"), echo.delay("x" * 4096)
        integration = installed(app)
        assert integration is not None
        integration.flush_creates()
    finally:
        uninstall(app)
    kept = client.get(book.keys.message(small.id))
    assert kept is not None
    message = KeptMessage.from_json(kept)
    assert json.loads(message.body) == [["ünï"], {}, {"callbacks": None, "errbacks": None,
                                                     "chain": None, "chord": None}]  # fmt: skip
    assert (message.name, message.content_type) == ("keep.echo", "application/json")
    assert "id" not in message.headers  # a retry gives the new task its own
    assert message.headers["argsrepr"] == "('ünï',)"
    for task_id in (small.id, large.id):
        book.apply(task_id, {"type": "cancel", "atMs": book.now_ms(), "reason": "stop"})
    [refused] = claim_resends(book.engine, [large.id])
    assert refused.code == "message-too-large"
    assert refused.text is not None
    assert "asyncbook_keep_message_limit" in refused.text
    info = book.info(large.id)
    assert info is not None
    assert (info.message_kept, info.retried_as) == (False, None)  # its size only
    kept_info = book.info(small.id)
    assert kept_info is not None
    assert kept_info.message_kept


def test_a_pickled_body_is_kept_as_its_bytes(namespace: str, client: redis.Redis) -> None:
    """Another serializer: the body kept as the bytes kombu sends (here pickle: a value
    JSON has no form for comes back as itself)."""
    app = memory_app("keep", asyncbook_keep_messages=True, task_serializer="pickle")
    when = datetime(2026, 12, 3, 7, 0, tzinfo=UTC)

    @app.task(tracked=True, shared=False, name="keep.at")
    def at(moment: datetime, tags: frozenset[str]) -> None:
        """Never run: only published."""

    book = RedisBook.from_url(URL, namespace=namespace)
    install(app, book)
    try:
        sent = at.delay(when, frozenset({"ünï"}))
        integration = installed(app)
        assert integration is not None
        integration.flush_creates()
    finally:
        uninstall(app)
    kept = client.get(book.keys.message(sent.id))
    assert kept is not None
    message = KeptMessage.from_json(kept)
    assert (message.content_type, message.content_encoding) == (
        "application/x-python-serialize",
        "binary",
    )
    args, kwargs, _embed = pickle.loads(message.body)
    assert (args, kwargs) == ((when, frozenset({"ünï"})), {})


SECRET_VALUE = "hunter2-at-rest"


def test_a_redacted_keyword_is_never_kept_readable_at_rest(
    namespace: str, client: redis.Redis
) -> None:
    """With ``asyncbook_keep_messages`` on, a message carrying a keyword argument that
    ``asyncbook_redact`` masks is not kept, unless its task is named in
    ``asyncbook_keep_redacted_messages``: no value of the namespace holds the secret,
    ``messageKept`` is false and a retry says why."""
    app = memory_app(
        "keep",
        asyncbook_keep_messages=True,
        asyncbook_keep_redacted_messages=["keep.login_anyway"],
    )

    @app.task(tracked=True, shared=False, name="keep.login")
    def login(user: str, password: str = "") -> str:
        return user

    @app.task(tracked=True, shared=False, name="keep.login_anyway")
    def login_anyway(user: str, password: str = "") -> str:
        return user

    book = RedisBook.from_url(URL, namespace=namespace)
    install(app, book)
    try:
        masked = login.delay("ana", password=SECRET_VALUE)
        plain = login.delay("ana")
        integration = installed(app)
        assert integration is not None
        integration.flush_creates()
    finally:
        uninstall(app)
    held = [
        key for key, value in values_at_rest(client, namespace) if SECRET_VALUE.encode() in value
    ]
    assert held == []
    info = book.info(masked.id)
    assert info is not None
    assert info.message_kept is False
    assert info.kwargs_repr == "{'password': '***'}"
    plain_info = book.info(plain.id)
    assert plain_info is not None
    assert plain_info.message_kept
    book.apply(masked.id, {"type": "cancel", "atMs": book.now_ms(), "reason": "stop"})
    [refused] = claim_resends(book.engine, [masked.id])
    assert refused.code == "no-message"
    assert refused.text is not None
    assert "password" in refused.text
    assert "asyncbook_keep_redacted_messages" in refused.text
    assert SECRET_VALUE not in refused.text


def test_a_task_named_to_keep_its_redacted_message_keeps_it(
    namespace: str, client: redis.Redis
) -> None:
    app = memory_app(
        "keep",
        asyncbook_keep_messages=True,
        asyncbook_keep_redacted_messages=["keep.login_anyway"],
    )

    @app.task(tracked=True, shared=False, name="keep.login_anyway")
    def login_anyway(user: str, password: str = "") -> str:
        return user

    book = RedisBook.from_url(URL, namespace=namespace)
    install(app, book)
    try:
        sent = login_anyway.delay("ana", password=SECRET_VALUE)
        integration = installed(app)
        assert integration is not None
        integration.flush_creates()
    finally:
        uninstall(app)
    kept = client.get(book.keys.message(sent.id))
    assert kept is not None
    assert json.loads(KeptMessage.from_json(kept).body)[1] == {"password": SECRET_VALUE}
    info = book.info(sent.id)
    assert info is not None
    assert info.message_kept
