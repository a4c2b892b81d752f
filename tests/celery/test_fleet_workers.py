"""Live workers (issue 34): a real prefork ``celery -A workers worker`` announces itself
and is listed online with its queues, pool and concurrency; a graceful stop marks it
offline at once; a SIGKILLed one goes offline after the silence."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import pytest
import redis

from asyncbook import RedisBook, WorkerSummary
from asyncbook._fleet import WORKER_SILENCE_MS

from ..support import ROOT
from ..support.books import delete_namespace
from ..support.celery import CELERY_URL as URL
from ..support.celery import CeleryWorker, wait_for

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]


def _listed(book: RedisBook, name: str) -> WorkerSummary | None:
    return next((w for w in book.workers(3_600_000) if w.name == name), None)


def _online(book: RedisBook, name: str) -> bool | None:
    found = _listed(book, name)
    return None if found is None else found.online


def test_a_started_worker_is_online_and_a_stopped_one_offline_at_once(
    tmp_path: Path, client: redis.Redis
) -> None:
    worker = CeleryWorker(ROOT, URL, tmp_path / "worker.log", concurrency=2)
    book = RedisBook.from_url(URL, namespace=worker.namespace)
    try:
        worker.start()
        found = wait_for(lambda: _listed(book, worker.name), 10)
        assert found is not None
        assert found.online is True
        record = found.record
        assert record is not None
        assert worker.queue in record.queues
        assert (record.pool, record.concurrency) == ("prefork", 2)
        assert record.prefetch == 2 * 1  # celeryconfig: worker_prefetch_multiplier = 1
        assert worker.process is not None
        assert record.pid == worker.process.pid
        assert record.celery_version
        assert record.asyncbook_version
        assert record.started_ms
        records, _now = book.worker_records()
        assert [(r.name, online) for r, online in records] == [(worker.name, True)]
        worker.stop()  # SIGTERM: a warm, graceful shutdown
        gone = _listed(book, worker.name)
        assert gone is not None
        assert gone.online is False
        assert gone.record is not None
        assert gone.record.stopped_ms is not None
    finally:
        worker.stop()
        delete_namespace(client, worker.namespace)


@pytest.mark.long
def test_a_killed_worker_goes_offline_after_the_silence(
    tmp_path: Path, client: redis.Redis
) -> None:
    worker = CeleryWorker(ROOT, URL, tmp_path / "worker.log", concurrency=1)
    book = RedisBook.from_url(URL, namespace=worker.namespace)
    try:
        worker.start()
        assert wait_for(lambda: _online(book, worker.name), 10)
        assert worker.process is not None
        pid = worker.process.pid
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        worker.process.send_signal(signal.SIGKILL)
        worker.process.wait()
        for child in children:  # the pool's processes, orphaned
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(child), signal.SIGKILL)
        still = _listed(book, worker.name)
        assert still is not None
        assert still.online is True
        assert wait_for(lambda: _online(book, worker.name) is False, 30)
        kept = _listed(book, worker.name)
        assert kept is not None
        assert kept.record is not None
        assert kept.record.stopped_ms is None
        assert kept.record.renewed_ms >= kept.last_seen_ms - WORKER_SILENCE_MS
    finally:
        worker.stop()
        delete_namespace(client, worker.namespace)
