"""Results by reference (``asyncbook_artifacts``) with real prefork workers: a 20 MB
result in an S3-compatible store (moto on loopback), read through ``AsyncResult.get()``
(checked against its hash) and through a presigned URL; a small one stays in Redis; a
changed object is an error naming its ref; a bad setting names itself."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
import redis
from celery import Celery
from celery.result import AsyncResult

from asyncbook import ArtifactError, AsyncBookError, RedisBook
from asyncbook.artifacts import digest_of
from asyncbook.celery import cancel
from asyncbook.celery._artifacts import Artifacts
from asyncbook.celery._backend import AsyncBookBackend
from asyncbook.celery._settings import Settings

from ..support import ROOT
from ..support.celery import CELERY_URL as URL
from ..support.celery import (
    CeleryWorker,
    close_result_backend,
    example_app,
    wait_for,
    wait_terminal,
)
from ..support.s3 import S3Server, s3_server

pytestmark = [pytest.mark.redis, pytest.mark.timeout(180)]

SIZE = 20 * 1024 * 1024


def rendered(size: int, seed: int = 0) -> bytes:
    """What ``workers.render`` returns."""
    block = hashlib.sha256(f"{seed}".encode()).digest()
    return (block * (size // len(block) + 1))[:size]


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with s3_server(tmp_path_factory.mktemp("s3") / "moto.log") as server:
        yield server


@pytest.fixture(scope="module")
def bucket(s3: S3Server) -> str:
    return s3.bucket()


@pytest.fixture(scope="module")
def worker(
    tmp_path_factory: pytest.TempPathFactory, client: redis.Redis, s3: S3Server, bucket: str
) -> Iterator[CeleryWorker]:
    tmp = tmp_path_factory.mktemp("artifact-worker")
    worker = CeleryWorker(ROOT, URL, tmp / "worker.log", concurrency=2)
    worker.extra = ["-Q", worker.queue]
    worker.env = {
        **s3.env,
        "ASYNCBOOK_ARTIFACTS": f"s3://{bucket}/results",
        "ASYNCBOOK_ARTIFACT_THRESHOLD": "1024",
    }
    with worker.running(client):
        yield worker


@pytest.fixture(scope="module")
def app(worker: CeleryWorker, s3: S3Server, bucket: str) -> Iterator[Celery]:
    """The example app publishing to the worker, reading the same store."""
    with example_app(worker.queue, worker.namespace) as app:
        app.conf.update(
            asyncbook_artifacts=f"s3://{bucket}/results", asyncbook_artifact_options=s3.options
        )
        yield app
        for name in ("asyncbook_artifacts", "asyncbook_artifact_options"):
            app.conf.pop(name, None)
        close_result_backend(app)


@pytest.fixture
def backend(app: Celery) -> Iterator[AsyncBookBackend]:
    """asyncbook's result backend in this process, on the worker's Redis."""
    backend = AsyncBookBackend(app=app, url=URL)
    yield backend
    consumer: Any = backend.result_consumer
    consumer.stop()
    consumer._pubsub = None
    backend.client.connection_pool.disconnect()


def test_a_20_mb_result_is_stored_by_reference_and_read_back_checked(
    app: Celery, worker: CeleryWorker, backend: AsyncBookBackend, client: redis.Redis, bucket: str
) -> None:
    from workers.tasks import render

    expected = rendered(SIZE, seed=7)
    sent = render.apply_async((SIZE, 7))
    value: bytes = AsyncResult(sent.id, backend=backend, app=app).get(timeout=120)
    assert value == expected
    book = RedisBook.from_url(URL, namespace=worker.namespace)
    task = wait_terminal(book, sent.id)
    assert task.state == "succeeded"
    assert task.result_ref == f"s3://{bucket}/results/{worker.namespace}/{sent.id}/" + (
        hashlib.sha256(expected).hexdigest()
    )
    assert task.result_hash == digest_of(expected)
    # Redis holds the reference, not the body.
    assert client.strlen(backend.get_key_for_task(sent.id)) < 1024
    # The presigned URL: anyone holding it reads the same bytes, without credentials.
    artifacts = backend.artifacts
    assert artifacts is not None
    url = artifacts.store.presign(task.result_ref, 300)
    assert url is not None
    assert url.startswith(app.conf.asyncbook_artifact_options["endpoint_url"])
    answer = httpx.get(url, timeout=60)
    assert answer.status_code == 200
    assert digest_of(answer.content) == task.result_hash


def test_a_small_result_stays_in_redis(
    app: Celery, worker: CeleryWorker, backend: AsyncBookBackend
) -> None:
    from workers.tasks import render

    sent = render.apply_async((100,))
    assert AsyncResult(sent.id, backend=backend, app=app).get(timeout=30) == rendered(100)
    book = RedisBook.from_url(URL, namespace=worker.namespace)
    task = wait_terminal(book, sent.id)
    assert task.result_ref == backend.get_key_for_task(sent.id).decode()


def test_a_changed_artifact_is_an_error_naming_its_ref(
    app: Celery, worker: CeleryWorker, backend: AsyncBookBackend, s3: S3Server, bucket: str
) -> None:
    from workers.tasks import render

    sent = render.apply_async((4096, 3))
    book = RedisBook.from_url(URL, namespace=worker.namespace)
    task = wait_terminal(book, sent.id)
    assert task.result_ref is not None
    assert task.result_ref.startswith("s3://")
    key = task.result_ref.removeprefix(f"s3://{bucket}/")
    boto3.client("s3", **s3.options).put_object(Bucket=bucket, Key=key, Body=b"tampered")
    with pytest.raises(ArtifactError) as caught:
        AsyncResult(sent.id, backend=backend, app=app).get(timeout=30)
    assert caught.value.ref == task.result_ref
    assert task.result_ref in str(caught.value)


@pytest.mark.parametrize(
    ("conf", "field"),
    [
        ({"asyncbook_artifacts": 3}, "asyncbook_artifacts"),
        ({"asyncbook_artifacts": "ftp://host/x"}, "asyncbook_artifacts"),
        ({"asyncbook_artifacts": "s3:///x"}, "asyncbook_artifacts"),
        ({"asyncbook_artifact_threshold": -1}, "asyncbook_artifact_threshold"),
        ({"asyncbook_artifact_threshold": "1k"}, "asyncbook_artifact_threshold"),
        ({"asyncbook_artifact_options": ["x"]}, "asyncbook_artifact_options"),
        ({"asyncbook_artifact_url_expiry": 0}, "asyncbook_artifact_url_expiry"),
        ({"asyncbook_artifact_sweep": -5}, "asyncbook_artifact_sweep"),
    ],
)
def test_a_bad_artifact_setting_names_itself(conf: dict[str, Any], field: str) -> None:
    with pytest.raises(AsyncBookError) as caught:
        Settings.from_conf(conf)
    assert caught.value.field == field
    assert field in str(caught.value)


def test_artifact_settings_read(tmp_path: Path) -> None:
    settings = Settings.from_conf(
        {"asyncbook_artifacts": tmp_path.as_uri(), "asyncbook_artifact_threshold": 10}
    )
    assert settings.artifacts.url == tmp_path.as_uri()
    assert settings.artifacts.threshold == 10
    assert Settings.from_conf({}).artifacts.url is None


@pytest.mark.parametrize("task_id", ["é" * 50, "x" * 300, "é" * 4096])
def test_a_result_whose_id_is_too_long_for_a_key_stays_in_redis(
    tmp_path: Path, task_id: str
) -> None:
    """A task id may take 4,096 characters; escaped into a key it may pass a file name's
    255 bytes or S3's 1,024: its result is kept in Redis, not failed at the store."""
    settings = Settings.from_conf({"asyncbook_artifacts": tmp_path.as_uri()})
    artifacts = Artifacts(settings.artifacts, "ns")
    assert artifacts.offload(task_id, "x" * 1000, "json") is None  # 50 é: 300 escaped
    assert list(tmp_path.iterdir()) == []
    assert artifacts.offload("short", "x" * 1000, "json") is not None


def test_a_success_the_book_refuses_deletes_its_artifact(
    app: Celery, worker: CeleryWorker, s3: S3Server, bucket: str
) -> None:
    """Cancelled while it ran: its success is refused, and what it stored is deleted."""
    from workers.tasks import render

    sent = render.apply_async((8192, 5), {"delay": 2.0})
    book = RedisBook.from_url(URL, namespace=worker.namespace)
    wait_for(lambda: (task := book.get(sent.id)) is not None and task.state.value == "running")
    assert cancel(app, sent.id, reason="user left").reason == "cancelled"
    wait_for(lambda: f"render[{sent.id}] succeeded" in worker.output(), timeout=20)
    prefix = f"results/{worker.namespace}/{sent.id}/"
    listed = boto3.client("s3", **s3.options).list_objects_v2(Bucket=bucket, Prefix=prefix)
    assert listed.get("Contents", []) == []
    task = book.get(sent.id)
    assert task is not None
    assert (task.state.value, task.result_ref) == ("cancelled", None)
