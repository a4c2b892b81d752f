"""Nothing is orphaned: a prefork worker killed between writing its result to the
store and the book's write of its success leaves an artifact no record names, and the
orphan sweep finds it and deletes it."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from asyncbook import RedisBook
from asyncbook.artifacts import LocalStore, sweep_orphans

from ..support import ROOT
from ..support.celery import CELERY_URL as URL
from ..support.celery import CeleryWorker, close_result_backend, example_app, wait_for
from ..support.processes import kill_worker

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]


def test_a_worker_killed_between_the_upload_and_the_success_leaves_an_orphan_the_sweep_deletes(
    tmp_path: Path, client: redis.Redis
) -> None:
    """The result is in the store, the book's write waits (CLIENT PAUSE WRITE: the
    write never runs once its connection is gone), and the worker dies: no record names
    the artifact, so the orphan sweep finds it and deletes it."""
    from workers.tasks import render

    store = LocalStore(tmp_path / "artifacts")
    worker = CeleryWorker(ROOT, URL, tmp_path / "worker.log", concurrency=1)
    worker.extra = ["-Q", worker.queue]
    worker.env = {"ASYNCBOOK_ARTIFACTS": store.url, "ASYNCBOOK_ARTIFACT_THRESHOLD": "0"}
    with worker.running(client), example_app(worker.queue, worker.namespace) as app:
        book = RedisBook.from_url(URL, namespace=worker.namespace)
        sent = render.apply_async((50_000,), {"delay": 1.0})
        # The worker took the message (and marked it unacked) before writes wait.
        wait_for(lambda: client.llen(worker.queue) == 0, timeout=20)
        wait_for(lambda: client.hlen("unacked") > 0 or client.exists(f"{worker.queue}-unacked"))
        client.client_pause(20_000, all=False)
        try:
            wait_for(lambda: list(store.list("")), timeout=15)  # uploaded
            kill_worker(worker)
        finally:
            client.client_unpause()
        close_result_backend(app)
        task = book.get(sent.id)
        assert task is not None
        assert task.state.value != "succeeded"
        assert task.result_ref is None
        [orphan] = list(store.list(""))
        assert orphan.size == 50_000
        young = sweep_orphans(store, book, worker.namespace, delete=True)
        assert young.orphans == []  # within the grace period: perhaps being written now
        swept = sweep_orphans(store, book, worker.namespace, older_than_s=0, delete=True)
        assert [o.ref for o in swept.orphans] == [orphan.ref]
        assert list(store.list("")) == []
