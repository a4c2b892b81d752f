"""``asyncbook result`` (a task's result, fetched and checked) and ``asyncbook artifacts
sweep`` (orphans listed, then deleted) on a local-directory store."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from asyncbook import RedisBook, StartEvent, SucceedEvent
from asyncbook.artifacts import LocalStore, S3Store, digest_of, key_for

from ..support.cli import run
from ..support.s3 import S3Server, s3_server

NOW = 1_700_000_000_000


def succeeded(book: RedisBook, task_id: str, ref: str, digest: str) -> None:
    book.create(id=task_id, now_ms=NOW, ttl_ms=3_600_000, max_attempts=1)
    book.apply(task_id, StartEvent(at_ms=NOW + 1, worker="w"))
    book.apply(task_id, SucceedEvent(at_ms=NOW + 2, result_ref=ref, result_hash=digest))


def stored(store: LocalStore, namespace: str, task_id: str, data: bytes) -> str:
    return store.put(key_for(namespace, task_id, digest_of(data)), data, "application/json")


def test_result_fetches_and_checks_a_stored_result(book: RedisBook, tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    data = json.dumps({"text": "hello " * 100}).encode()
    ref = stored(store, book.namespace, "t-1", data)
    succeeded(book, "t-1", ref, digest_of(data))
    out = run(book, "result", "t-1", "--artifacts", store.url)
    assert out.exit_code == 0, out.output
    assert out.stdout_bytes == data
    target = tmp_path / "out.json"
    written = run(book, "result", "t-1", "-o", str(target), "--artifacts", store.url)
    assert written.exit_code == 0, written.output
    assert target.read_bytes() == data
    assert f"{len(data)} bytes" in written.stderr
    # Changed behind the book's back: an error naming the ref, nothing written.
    Path(store.root / store.key_of(ref)).write_bytes(b"changed")
    bad = run(book, "result", "t-1", "--artifacts", store.url)
    assert bad.exit_code == 1
    assert ref in bad.stderr
    assert "hash" in bad.stderr


def test_result_says_why_it_has_none(book: RedisBook, tmp_path: Path) -> None:
    book.create(id="running", now_ms=NOW, ttl_ms=3_600_000, max_attempts=1)
    assert run(book, "result", "running").exit_code == 1
    assert "has no result (queued)" in run(book, "result", "running").stderr
    assert run(book, "result", "nope").exit_code == 1
    succeeded(book, "stored", (tmp_path / "x").as_uri(), "sha256:00")
    no_store = run(book, "result", "stored")
    assert no_store.exit_code == 2
    assert "--artifacts" in no_store.stderr
    outside = run(book, "result", "stored", "--artifacts", (tmp_path / "store").as_uri())
    assert outside.exit_code == 1
    assert "not in the store" in outside.stderr


def test_result_reads_a_result_celery_keeps_in_redis(book: RedisBook) -> None:
    ref = f"celery-task-meta-{book.namespace}-t"
    value = {"b": [1, 2], "a": "é"}
    book.client.set(ref, json.dumps({"status": "SUCCESS", "result": value}), ex=60)
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    succeeded(book, "t", ref, digest_of(canonical.encode()))
    out = run(book, "result", "t")
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout) == value


def test_the_sweep_lists_then_deletes_orphans_only(book: RedisBook, tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    kept = stored(store, book.namespace, "kept", b'"kept"')
    succeeded(book, "kept", kept, digest_of(b'"kept"'))
    orphan = stored(store, book.namespace, "gone", b'"gone"')  # no record
    book.create(id="failed", now_ms=NOW, ttl_ms=3_600_000, max_attempts=1)
    stale = stored(store, book.namespace, "failed", b'"attempt"')  # its record names none
    other = stored(store, "another-namespace", "x", b'"x"')
    listed = run(
        book, "artifacts", "sweep", "--older-than", "0", "--json", "--artifacts", store.url
    )
    assert listed.exit_code == 0, listed.output
    report = json.loads(listed.stdout)
    assert sorted(o["ref"] for o in report["orphans"]) == sorted([orphan, stale])
    assert (report["kept"], report["deleted"]) == (1, False)
    young = run(book, "artifacts", "sweep", "--json", "--artifacts", store.url)
    assert json.loads(young.stdout)["orphans"] == []  # younger than an hour: not yet
    deleted = run(
        book, "artifacts", "sweep", "--older-than", "0", "--delete", "--artifacts", store.url
    )
    assert deleted.exit_code == 0, deleted.output
    assert "2 orphan(s), 1 artifact(s) named by a record" in deleted.stdout
    assert sorted(s.ref for s in store.list("")) == sorted([kept, other])


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with s3_server(tmp_path_factory.mktemp("s3") / "moto.log") as server:
        yield server


def test_deliver_hands_over_a_presigned_url(
    book: RedisBook, s3: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in s3.env.items():
        monkeypatch.setenv(name, value)  # boto3 reads them, as a worker's would
    url = f"s3://{s3.bucket()}/results"
    store = S3Store(url, s3.options)
    data = b"\x00audio" * 1000
    ref = store.put(key_for(book.namespace, "t", digest_of(data)), data, "audio/wav")
    succeeded(book, "t", ref, digest_of(data))
    out = run(book, "deliver", "t", "--key", "k-1", "--artifacts", url, "--json")
    assert out.exit_code == 0, out.output
    body = json.loads(out.stdout)
    assert body["receipt"]["resultRef"] == ref
    assert httpx.get(body["download"]["url"]).content == data
    plain = run(book, "deliver", "t", "--key", "k-1")
    assert "download" not in plain.stdout
    assert plain.stdout.startswith("duplicate-delivery: " + ref)
    fetched = run(book, "result", "t", "--artifacts", url)
    assert fetched.stdout_bytes == data
