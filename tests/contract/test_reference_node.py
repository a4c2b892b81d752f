"""Every book answers as the reference itself: ``async-task.ts`` compiled and run under node
(``support/reference_node``) on the same seeded operation sequences as each book, every
whole JSON answer compared, error codes included (``support/reference_cases`` says which
edge values, and how the one deviation of docs/spec.md is avoided).

One node process answers a whole batch; each sequence runs on a fresh book (a namespace of
its own). The asyncio book answers get, resume and deliver, beside a sync book that writes.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from asyncbook import AsyncBook, MemoryBook, RedisBook
from asyncbook.redis import AsyncRedisBook

from ..conftest import BOOK_KINDS, SHARDED_KINDS
from ..support.books import delete_namespace, kind_async_client, kind_client
from ..support.operations import run_operation
from ..support.reference_cases import (
    ASYNC_OPERATIONS,
    RETENTION_VERSIONS,
    assert_same,
    batch,
    driver_ops,
    run_async_operation,
)
from ..support.reference_node import ReferenceNode, reference_node

SEED = 30
SHARDS = {"redis-s4": 4, "cluster-s16": 16}
SEQUENCES = {
    "memory": 400,
    "redis": 100,
    "fakeredis": 24,
    "cluster": 20,
    "redis-s4": 50,
    "cluster-s16": 16,
}
"""How many sequences each kind runs in ``make test`` (the long test runs ten times more;
the asyncio test half as many)."""


@pytest.fixture(scope="module")
def reference() -> ReferenceNode:
    return reference_node()


@contextmanager
def sync_client(request: pytest.FixtureRequest, kind: str) -> Iterator[Any]:
    client = kind_client(request, kind)
    try:
        yield client
    finally:
        client.close()


@contextmanager
def fresh_books(request: pytest.FixtureRequest, kind: str) -> Iterator[Callable[[], AsyncBook]]:
    """A new book of ``kind`` on a namespace of its own at each call."""
    if kind == "memory":
        yield lambda: MemoryBook(retention_versions=RETENTION_VERSIONS)
        return
    base = f"ref-{uuid.uuid4().hex[:12]}"
    names = iter(range(1_000_000))
    with sync_client(request, kind) as client:

        def make() -> AsyncBook:
            namespace = f"{base}-{next(names)}"
            return RedisBook(
                client,
                namespace=namespace,
                retention_versions=RETENTION_VERSIONS,
                shards=SHARDS.get(kind, 1),
            )

        try:
            yield make
        finally:
            delete_namespace(client, f"{base}-*")  # every namespace of this test at once


def check_kind(
    request: pytest.FixtureRequest, reference: ReferenceNode, kind: str, seed: int, count: int
) -> None:
    sequences = batch(seed, count)
    want = reference.run([driver_ops(ops) for ops in sequences], RETENTION_VERSIONS)
    with fresh_books(request, kind) as make:
        got = []
        for ops in sequences:
            book = make()
            got.append([run_operation(book, op) for op in ops])
    assert_same(f"{kind} (seed {seed})", sequences, got, want)


@pytest.mark.parametrize("kind", BOOK_KINDS + SHARDED_KINDS)
def test_every_book_answers_as_the_reference(
    request: pytest.FixtureRequest, reference: ReferenceNode, kind: str
) -> None:
    check_kind(request, reference, kind, SEED, SEQUENCES[kind])


@pytest.mark.long
@pytest.mark.parametrize("kind", BOOK_KINDS + SHARDED_KINDS)
def test_every_book_answers_as_the_reference_at_length(
    request: pytest.FixtureRequest, reference: ReferenceNode, kind: str
) -> None:
    """Ten times as many sequences, from a new seed each run (the failure names it;
    ``ASYNCBOOK_REFERENCE_SEED`` replays it)."""
    seed = int(os.environ.get("ASYNCBOOK_REFERENCE_SEED") or time.time())
    check_kind(request, reference, kind, seed, 10 * SEQUENCES[kind])


ASYNC_KINDS = ["redis", "fakeredis", "redis-s4", "cluster-s16"]


@pytest.mark.parametrize("kind", ASYNC_KINDS)
def test_the_asyncio_book_answers_as_the_reference(
    request: pytest.FixtureRequest, reference: ReferenceNode, kind: str
) -> None:
    """Get, resume and deliver through ``AsyncRedisBook`` (sharded too), the writes
    through a sync book of the same namespace."""
    sequences = batch(SEED + 1, SEQUENCES[kind] // 2)
    want = reference.run([driver_ops(ops) for ops in sequences], RETENTION_VERSIONS)
    base = f"ref-{uuid.uuid4().hex[:12]}"
    shards = SHARDS.get(kind, 1)

    async def run_all(sync: Any) -> list[list[Any]]:
        client = kind_async_client(request, kind, sync)
        got = []
        try:
            for number, ops in enumerate(sequences):
                settings: dict[str, Any] = {
                    "namespace": f"{base}-{number}",
                    "retention_versions": RETENTION_VERSIONS,
                    "shards": shards,
                }
                writer = RedisBook(sync, **settings)
                reader = AsyncRedisBook(client, **settings)
                answers = []
                for op in ops:
                    if op[0] in ASYNC_OPERATIONS:
                        answers.append(await run_async_operation(reader, op))
                    else:
                        answers.append(run_operation(writer, op))
                got.append(answers)
        finally:
            await client.aclose()
        return got

    with sync_client(request, kind) as sync:
        try:
            got = asyncio.run(run_all(sync))
        finally:
            delete_namespace(sync, f"{base}-*")
    assert_same(f"asyncio {kind}", sequences, got, want)
