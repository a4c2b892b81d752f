"""``GET /api/tasks/{id}/result`` (a result stored by reference, through the server,
under the read role) and the presigned URL a delivery hands over beside its receipt."""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
import redis

from asyncbook import RedisBook, StartEvent, SucceedEvent, to_wire
from asyncbook.artifacts import ArtifactStore, LocalStore, S3Store, digest_of, key_for
from asyncbook.cli._meta_results import meta_result
from asyncbook.web import AccessRules

from ..support.s3 import S3Server, s3_server
from ..support.web_server import WEB_REDIS_URL, Running, assert_error, running_server

pytestmark = pytest.mark.redis

OPERATOR = "operator-token-0123456789"
READER = "reader-token-0123456789ab"
READ = {"Authorization": f"Bearer {READER}"}
HOUR_MS = 3_600_000


def succeeded(book: RedisBook, task_id: str, store: ArtifactStore, data: bytes) -> str:
    """A task that succeeded with ``data`` stored by reference in ``store``; its ref."""
    digest = digest_of(data)
    ref = store.put(key_for(book.namespace, task_id, digest), data, "application/octet-stream")
    now = book.now_ms()
    book.create(id=task_id, now_ms=now, ttl_ms=HOUR_MS, max_attempts=1)
    book.apply(task_id, StartEvent(at_ms=now + 1, worker="w"))
    book.apply(task_id, SucceedEvent(at_ms=now + 2, result_ref=ref, result_hash=digest))
    return ref


def result_url(server: Running, task_id: str) -> str:
    return f"{server.url}/api/tasks/{quote(task_id, safe='')}/result"


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    return LocalStore(tmp_path / "artifacts")


@pytest.fixture
def server(store: LocalStore) -> Iterator[Running]:
    access = AccessRules.of(token=OPERATOR, read_token=READER)
    with running_server(access=access, artifacts=store) as running:
        yield running


def test_the_read_role_downloads_a_result_checked(server: Running, store: LocalStore) -> None:
    text = json.dumps({"transcript": "hello"}).encode()
    succeeded(server.book, "a/b é", store, text)
    answer = httpx.get(result_url(server, "a/b é"), headers=READ)
    assert answer.status_code == 200, answer.text
    assert answer.content == text
    assert answer.headers["content-type"] == "application/json"
    assert answer.headers["x-result-hash"] == digest_of(text)
    assert "attachment" in answer.headers["content-disposition"]
    binary = bytes(range(256)) * 10
    succeeded(server.book, "audio", store, binary)
    audio = httpx.get(result_url(server, "audio"), headers=READ)
    assert audio.headers["content-type"] == "application/octet-stream"
    assert audio.content == binary
    assert httpx.get(result_url(server, "audio")).status_code == 401


def test_no_result_an_unknown_task_and_a_changed_one(server: Running, store: LocalStore) -> None:
    book = server.book
    assert_error(httpx.get(result_url(server, "nope"), headers=READ), 404, "invalid-request")
    book.create(id="queued", now_ms=book.now_ms(), ttl_ms=HOUR_MS, max_attempts=1)
    assert_error(httpx.get(result_url(server, "queued"), headers=READ), 409, "no-result")
    ref = succeeded(book, "changed", store, b"original")
    (store.root / store.key_of(ref)).write_bytes(b"changed")
    damaged = httpx.get(result_url(server, "changed"), headers=READ)
    assert_error(damaged, 502, "damaged")
    assert ref in damaged.json()["message"]
    # A ref outside the server's store (any client may write a resultRef) is never read.
    now = book.now_ms()
    book.create(id="outside", now_ms=now, ttl_ms=HOUR_MS, max_attempts=1)
    book.apply("outside", StartEvent(at_ms=now + 1, worker="w"))
    book.apply(
        "outside", SucceedEvent(at_ms=now + 2, result_ref="file:///etc/passwd", result_hash="h")
    )
    assert_error(httpx.get(result_url(server, "outside"), headers=READ), 404, "invalid-request")


def test_a_server_without_a_store_says_so(tmp_path: Path) -> None:
    with running_server() as server:
        succeeded(server.book, "t", LocalStore(tmp_path), b"x")
        assert_error(httpx.get(result_url(server, "t")), 404, "no-store")


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with s3_server(tmp_path_factory.mktemp("s3") / "moto.log") as server:
        yield server


def test_a_delivery_hands_over_a_presigned_url_beside_the_receipt(s3: S3Server) -> None:
    store = S3Store(f"s3://{s3.bucket()}/results", s3.options)
    with running_server(artifacts=store) as server:
        data = b"\x89PNG" + bytes(5000)
        succeeded(server.book, "render", store, data)
        url = f"{server.url}/api/tasks/render/delivery"
        first = httpx.post(url, headers={"Idempotency-Key": "order-7"})
        assert first.status_code == 200, first.text
        body = first.json()
        # The receipt is the book's, unchanged; the download sits beside it.
        again = server.book.deliver_result("render", "order-7", server.book.now_ms())
        assert again.receipt is not None
        assert body["receipt"] == to_wire(again.receipt)
        assert set(body) == {"ok", "duplicate", "reason", "receipt", "download"}
        download = body["download"]
        assert download["expiresAtMs"] > server.book.now_ms()
        fetched = httpx.get(download["url"])
        assert fetched.status_code == 200
        assert fetched.content == data
        repeat = httpx.post(url, headers={"Idempotency-Key": "order-7"}).json()
        assert (repeat["reason"], repeat["receipt"]) == ("duplicate-delivery", body["receipt"])


def test_a_local_store_hands_over_no_url(server: Running, store: LocalStore) -> None:
    succeeded(server.book, "t", store, b"x")
    answer = httpx.post(
        f"{server.url}/api/tasks/t/delivery",
        headers={"Idempotency-Key": "k", "Authorization": f"Bearer {OPERATOR}"},
    )
    assert answer.status_code == 200, answer.text
    assert "download" not in answer.json()


def test_a_result_celery_keeps_in_redis_is_read_as_asyncbook_serve_reads_it() -> None:
    value = {"caption": "a cat on a mat", "score": 0.97}
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    client = redis.Redis.from_url(WEB_REDIS_URL)  # the book's Redis, as serve's book client
    with running_server(results_elsewhere=partial(meta_result, client)) as server:
        book = server.book
        ref = f"celery-task-meta-{book.namespace}-t"
        book.client.set(ref, json.dumps({"status": "SUCCESS", "result": value}), ex=60)
        now = book.now_ms()
        book.create(id="t", now_ms=now, ttl_ms=HOUR_MS, max_attempts=1)
        book.apply("t", StartEvent(at_ms=now + 1, worker="w"))
        digest = digest_of(canonical.encode())
        book.apply("t", SucceedEvent(at_ms=now + 2, result_ref=ref, result_hash=digest))
        answer = httpx.get(result_url(server, "t"))
        assert answer.status_code == 200, answer.text
        assert json.loads(answer.content) == value
        assert answer.headers["content-type"] == "application/json"
        book.client.delete(ref)
        assert_error(httpx.get(result_url(server, "t")), 404, "not-found")
    client.close()
