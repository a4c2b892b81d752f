"""Nothing is orphaned: a prefork worker killed between writing its result to the
store and the book's write of its success leaves an artifact no record names, and the
orphan sweep finds it and deletes it; every worker's upkeep runs that sweep under the
namespace's sweep lease."""

from __future__ import annotations

import os
import time
from functools import partial
from pathlib import Path

import pytest
import redis
from celery import Celery

from asyncbook import RedisBook
from asyncbook.artifacts import LocalStore, sweep_orphans
from asyncbook.celery import install, uninstall
from asyncbook.celery._artifacts import Artifacts, ArtifactSettings
from asyncbook.celery._upkeep import Upkeep

from ..support import ROOT
from ..support.celery import CELERY_URL as URL
from ..support.celery import CeleryWorker, close_result_backend, example_app, wait_for
from ..support.processes import kill_worker

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]


@pytest.mark.long  # a fault run: its clients are told apart from other tests' by id
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
        # The worker took the message (and marked it unacked) before writes wait: this
        # message among the unacked ones (other runs may have left theirs there).
        wait_for(lambda: any(sent.id.encode() in held for held in client.hvals("unacked")), 20)
        before = {entry["id"] for entry in client.client_list()}
        client.client_pause(20_000, all=False)
        try:
            wait_for(lambda: list(store.list("")), timeout=15)  # uploaded
            kill_worker(worker)
            # Redis drops a held write only once it sees its connection closed: wait for
            # the connections made meanwhile (the killed worker's) to be gone first.
            wait_for(lambda: {entry["id"] for entry in client.client_list()} <= before, 10)
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


def test_the_workers_upkeep_deletes_old_orphans_under_the_sweep_lease(
    namespace: str, tmp_path: Path
) -> None:
    app = Celery("orphans", broker="memory://", backend="cache+memory://")
    book = RedisBook.from_url(URL, namespace=namespace)
    integration = install(app, book)
    settings = ArtifactSettings(url=(tmp_path / "store").as_uri(), sweep_s=60)
    artifacts = Artifacts(settings, namespace)
    store = artifacts.store
    for task_id in ("old", "young"):
        artifacts.offloaded(task_id, task_id * 100, None, "json")  # no record names either
    [old] = [s for s in store.list("") if "/old/" in s.key]
    an_hour_ago = time.time() - 3600
    os.utime(tmp_path / "store" / old.key, (an_hour_ago, an_hour_ago))
    upkeep = Upkeep(
        integration,
        "w@host",
        interval=0.1,
        warn_interval=60,
        orphans=partial(artifacts.sweep, book),
        orphan_interval=0.1,
    )
    try:
        upkeep.start()
        wait_for(lambda: len(list(store.list(""))) == 1, 10)
    finally:
        upkeep.stop()
        uninstall(app)
    [left] = list(store.list(""))
    assert "/young/" in left.key  # younger than asyncbook_artifact_sweep: perhaps in flight
