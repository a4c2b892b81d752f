"""Both artifact stores behind one interface: write, read back checked against the hash,
list, delete, presign; refs outside the store refused; the key layout."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from asyncbook import ArtifactError
from asyncbook.artifacts import (
    ArtifactStore,
    LocalStore,
    S3Store,
    aread,
    digest_of,
    key_for,
    open_store,
    read,
    task_of_key,
)


def test_a_result_goes_in_and_comes_back_checked(store: ArtifactStore) -> None:
    data = b"\x00\x01 audio" * 1000
    key = key_for("ns", "task-1", digest_of(data))
    ref = store.put(key, data, "application/octet-stream")
    assert ref.startswith(store.url + "/")
    assert store.key_of(ref) == key
    assert read(store, ref, digest_of(data)) == data
    assert asyncio.run(aread(store, ref, digest_of(data))) == data
    assert [(s.key, s.ref, s.size) for s in store.list("ns/")] == [(key, ref, len(data))]
    with pytest.raises(ArtifactError) as caught:
        read(store, ref, digest_of(b"other"))
    assert caught.value.code == "damaged"
    assert caught.value.ref == ref
    assert ref in str(caught.value)
    assert caught.value.field == "resultRef"
    store.delete([key, key_for("ns", "gone", "0" * 64)])
    assert list(store.list("ns/")) == []
    with pytest.raises(ArtifactError) as missing:
        store.get(ref)
    assert missing.value.code == "not-found"


def test_a_ref_outside_the_store_is_refused(store: ArtifactStore, tmp_path: Path) -> None:
    outside = [
        "file:///etc/passwd",
        (tmp_path / "elsewhere").as_uri(),
        "s3://another-bucket/results/ns/t/" + "0" * 64,
        store.url + "/../escape",
        "http://example.com/x",
    ]
    for ref in outside:
        with pytest.raises(ArtifactError) as caught:
            store.get(ref)
        assert caught.value.code in ("invalid-request", "not-found"), ref


def test_an_s3_store_presigns_a_url_anyone_can_read(store: ArtifactStore) -> None:
    data = b"x" * 4096
    ref = store.put(key_for("ns", "t", digest_of(data)), data, "application/octet-stream")
    url = store.presign(ref, 60)
    if isinstance(store, LocalStore):
        assert url is None
        return
    assert url is not None
    answer = httpx.get(url)
    assert answer.status_code == 200
    assert answer.content == data


def test_keys_are_injective_and_tell_their_task() -> None:
    digest = digest_of(b"r")
    seen = {key_for(ns, task, digest) for ns in ("a", "a/b", "a%2Fb", ".") for task in ("t", "..")}
    assert len(seen) == 8
    for ns, task in (("a/b", "../x"), ("name.space", "t.1"), ("%", "é")):
        key = key_for(ns, task, digest)
        assert task_of_key(key) == (ns, task)
        assert ".." not in key.split("/")
    assert task_of_key("loose-file") is None


def test_open_store_by_url(tmp_path: Path) -> None:
    assert isinstance(open_store((tmp_path / "a").as_uri()), LocalStore)
    assert isinstance(open_store(str(tmp_path / "b")), LocalStore)
    s3 = open_store("s3://bucket/some/prefix", {"region_name": "us-east-1"})
    assert isinstance(s3, S3Store)
    assert s3.url == "s3://bucket/some/prefix"
    for bad in ("ftp://host/x", "", "s3:///no-bucket"):
        with pytest.raises(ArtifactError) as caught:
            open_store(bad)
        assert caught.value.code == "invalid-request", bad


def test_a_listing_goes_on_while_another_sweep_deletes(store: ArtifactStore) -> None:
    """Two sweeps at once (workers' upkeep, the CLI): one deletes what the other is
    listing, and the listing goes on with what is left, no error."""
    keys = [key_for("ns", f"t{n}", digest_of(str(n).encode())) for n in range(6)]
    for n, key in enumerate(keys):
        store.put(key, str(n).encode(), "application/octet-stream")
    listing = store.list("ns/")
    first = next(listing)
    store.delete([key for key in keys if key != first.key])
    assert {item.key for item in listing} <= set(keys)  # S3 lists a page ahead: no error
    store.delete([first.key])
    store.put(keys[0], b"0", "application/octet-stream")  # its emptied folders come back
    assert [item.key for item in store.list("ns/")] == [keys[0]]
