"""Live workers (issue 34) on the status server and the doctor: the workers' records in
``/api/workers``, and a queue with ready messages no online worker consumes flagged by
``/api/health``, ``/api/queues``, ``/metrics`` and ``doctor``; the records' keys are
bounded (each expires) and on the namespace's slot."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from redis.crc import key_slot

from asyncbook import WorkerRecord
from asyncbook._console import PublishInfo
from asyncbook._fleet import WORKER_HISTORY_MS, WORKER_SILENCE_MS
from asyncbook._stranded import STRANDED_AFTER_MS
from asyncbook.celery import RedisBroker
from asyncbook.cli._doctor_fleet import fleet_checks

from ..support.broker import ready_queue
from ..support.celery import CELERY_URL
from ..support.web_server import Running, running_server

pytestmark = pytest.mark.redis


@pytest.fixture
def video() -> Iterator[str]:
    """A queue on the broker holding 2 ready messages, which no worker consumes."""
    with ready_queue(2) as name:
        yield name


@pytest.fixture
def server() -> Iterator[Running]:
    broker = RedisBroker(CELERY_URL)
    with running_server(broker=broker) as running:
        yield running
    broker.close()


def test_a_queue_no_online_worker_consumes_is_flagged(server: Running, video: str) -> None:
    book = server.book
    book.announce_worker(WorkerRecord(name="w1@host", pid=7, pool="prefork", queues=("celery",)))
    with httpx.Client(base_url=server.url, timeout=10) as http:
        workers = http.get("/api/workers").json()["workers"]
        assert [(w["name"], w["online"], w["record"]["pool"]) for w in workers] == [
            ("w1@host", True, "prefork")
        ]
        assert video in http.get("/api/health").json()["unconsumedQueues"]
        row = {q["name"]: q for q in http.get("/api/queues").json()["queues"]}[video]
        assert (row["ready"], row["onlineWorkers"], row["unconsumed"]) == (2, 0, True)
        metrics = http.get("/metrics").text
        assert 'asyncbook_workers_online{queue="celery"} 1.0' in metrics
        assert f'asyncbook_queue_unconsumed{{queue="{video}"}} 1.0' in metrics
        problems = [c for c in fleet_checks(book, CELERY_URL, "asyncbook") if video in c.detail]
        assert [(c.name, c.status) for c in problems] == [("consumed", "problem")]

        # A worker that consumes it comes online: no flag.
        book.announce_worker(WorkerRecord(name="w2@host", pid=8, queues=(video,)))
        assert video not in http.get("/api/health").json()["unconsumedQueues"]
        assert f'asyncbook_workers_online{{queue="{video}"}} 1.0' in http.get("/metrics").text
        assert not [c for c in fleet_checks(book, CELERY_URL, "asyncbook") if video in c.detail]

        # It shuts down: offline at once, and the queue is flagged again.
        book.retire_worker(WorkerRecord(name="w2@host", pid=8, queues=(video,)))
        online = {w["name"]: w["online"] for w in http.get("/api/workers").json()["workers"]}
        assert online == {"w1@host": True, "w2@host": False}
        assert video in http.get("/api/health").json()["unconsumedQueues"]


def test_the_records_keys_expire_and_share_the_namespaces_slot(server: Running) -> None:
    book = server.book
    book.announce_worker(WorkerRecord(name="w{1}@host", pid=7))
    keys = book.keys
    names = [keys.fleet, keys.worker_record("w{1}@host"), keys.worker_live("w{1}@host")]
    client = book.client
    assert {key_slot(name.encode()) for name in names} == {key_slot(keys.tag.encode())}
    ttls = [client.pttl(name) for name in names]
    assert 0 < ttls[2] <= WORKER_SILENCE_MS
    assert WORKER_SILENCE_MS < ttls[0] <= WORKER_HISTORY_MS
    assert WORKER_SILENCE_MS < ttls[1] <= WORKER_HISTORY_MS


def test_a_tracked_task_waiting_for_nobody_is_flagged(server: Running) -> None:
    book = server.book
    now = book.now_ms()
    old = PublishInfo(name="video.encode", queue="video-stranded")
    book.create(id="old", now_ms=now - STRANDED_AFTER_MS - 1_000, ttl_ms=3_600_000,
                max_attempts=1, info=old)  # fmt: skip
    fresh = PublishInfo(name="video.encode", queue="video-fresh")
    book.create(id="fresh", now_ms=now, ttl_ms=3_600_000, max_attempts=1, info=fresh)
    with httpx.Client(base_url=server.url, timeout=10) as http:
        assert http.get("/api/health").json()["strandedTasks"] == {"video-stranded": 1}
        assert http.get("/api/queues").json()["strandedTasks"] == {"video-stranded": 1}
        metrics = http.get("/metrics").text
        assert 'asyncbook_tasks_stranded{queue="video-stranded"} 1.0' in metrics
        (check,) = [c for c in fleet_checks(book, None, None) if c.name == "stranded"]
        assert (check.status, check.detail.endswith("1 in 'video-stranded'")) == ("problem", True)
        # A worker consuming it comes online: it waits for someone now.
        book.announce_worker(WorkerRecord(name="w@h", pid=1, queues=("video-stranded",)))
        assert http.get("/api/health").json()["strandedTasks"] == {}
        (check,) = [c for c in fleet_checks(book, None, None) if c.name == "stranded"]
        assert check.status == "ok"
