"""Output streams end to end: a real prefork ``celery -A workers worker`` runs
``stream_tokens`` (its first attempt retries halfway), and a client follows the task's
output over SSE (the status server's ``output-stream``), hangs up and reconnects with
``Last-Event-ID``: it gets every chunk of both attempts once, in order."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
import redis
from celery import Celery

from asyncbook import RedisBook
from asyncbook.celery import install, uninstall
from asyncbook.web import BackgroundServer, feed_for

from ..support import ROOT
from ..support.books import delete_namespace
from ..support.celery import CELERY_URL as URL
from ..support.celery import CeleryWorker, close_result_backend, unique, wait_terminal
from ..support.web_server import output_events

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]

TOKENS, RETRY_AFTER = 30, 10


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CeleryWorker]:
    log = tmp_path_factory.mktemp("output") / "worker.log"
    worker = CeleryWorker(ROOT, URL, log, concurrency=2)
    worker.start()
    yield worker
    worker.stop()
    client = redis.Redis.from_url(URL)
    delete_namespace(client, worker.namespace)
    for key in client.scan_iter(match=f"*{worker.queue}*"):
        client.delete(key)
    client.close()


@pytest.fixture(scope="module")
def app(worker: CeleryWorker) -> Iterator[Celery]:
    import workers

    app: Celery = workers.app
    app.conf.update(broker_url=URL, result_backend=URL, task_default_queue=worker.queue)
    install(app, RedisBook.from_url(URL, namespace=worker.namespace))
    yield app
    uninstall(app)
    close_result_backend(app)


def test_an_output_stream_is_followed_over_sse_through_a_reconnect(
    worker: CeleryWorker, app: Celery
) -> None:
    from workers.tasks import stream_tokens

    book = RedisBook.from_url(URL, namespace=worker.namespace)
    with BackgroundServer(book, feed_for(book)) as server:
        result = stream_tokens.apply_async(
            kwargs={"tokens": TOKENS, "delay": 0.02, "retry_after": RETRY_AFTER},
            task_id=unique("tokens"),
        )
        with httpx.Client(base_url=server.url.rstrip("/"), timeout=30) as client:
            first = output_events(client, result.id, 0, 5)  # then hang up
            rest = output_events(client, result.id, first[-1]["id"], 10**6)
    assert wait_terminal(book, result.id).state == "succeeded"
    got = first + rest
    assert got[-1]["event"] == "end"
    chunks = [event["data"] for event in got if event["event"] == "output"]
    expected = [f"0:{n} " for n in range(RETRY_AFTER)] + [f"1:{n} " for n in range(TOKENS)]
    assert [chunk["chunk"] for chunk in chunks] == expected
    assert [chunk["seq"] for chunk in chunks] == list(range(1, len(expected) + 1))
    assert [chunk["attempt"] for chunk in chunks] == [1] * RETRY_AFTER + [2] * TOKENS
    assert book.output(result.id).cursor == len(expected)
