"""Every book gives the same results as MemoryBook on random operation sequences."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import fakeredis
import pytest
import redis
from hypothesis import HealthCheck, given, settings

from asyncbook import MemoryBook, RedisBook
from asyncbook.redis import connect

from ..support.books import delete_namespace, redis_client
from ..support.operations import run_sequence, sequences


@pytest.fixture(scope="module")
def clients() -> Iterator[list[Any]]:
    real: redis.Redis = redis_client()
    yield [real, fakeredis.FakeRedis(server=fakeredis.FakeServer())]
    real.close()


@pytest.fixture(scope="module")
def cluster_client(cluster_url: str) -> Iterator[Any]:
    client = connect(cluster_url)
    yield client
    client.close()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=sequences)
def test_books_agree(clients: list[Any], ops: list[tuple[Any, ...]]) -> None:
    namespace = f"diff-{uuid.uuid4().hex[:12]}"
    expected = run_sequence(MemoryBook(retention_versions=3), ops)
    try:
        for client in clients:
            book = RedisBook(client, namespace=namespace, retention_versions=3)
            assert run_sequence(book, ops) == expected
    finally:
        for client in clients:
            delete_namespace(client, namespace)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=sequences)
def test_sharded_books_agree(clients: list[Any], ops: list[tuple[Any, ...]]) -> None:
    """A namespace of four shards answers as one (callback ids and idempotency keys
    global, in their task's shard or claimed in their own)."""
    namespace = f"diff-{uuid.uuid4().hex[:12]}"
    expected = run_sequence(MemoryBook(retention_versions=3), ops)
    try:
        for client in clients:
            book = RedisBook(client, namespace=namespace, retention_versions=3, shards=4)
            assert run_sequence(book, ops) == expected
    finally:
        for client in clients:
            delete_namespace(client, namespace)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=sequences)
def test_sixteen_shards_on_a_cluster_agree(cluster_client: Any, ops: list[tuple[Any, ...]]) -> None:
    """Sixteen shards over the local 3-master Cluster answer as the reference."""
    namespace = f"diff-{uuid.uuid4().hex[:12]}"
    expected = run_sequence(MemoryBook(retention_versions=3), ops)
    try:
        book = RedisBook(cluster_client, namespace=namespace, retention_versions=3, shards=16)
        assert run_sequence(book, ops) == expected
    finally:
        delete_namespace(cluster_client, namespace)
