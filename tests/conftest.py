"""Shared fixtures: a factory of books, parametrized over every book implementation.

``memory`` is the reference book in one process; ``redis`` is RedisBook on the real
Redis (127.0.0.1:6379, db 10, a fresh namespace per test, cleaned up afterwards);
``fakeredis`` is RedisBook on an embedded fakeredis server with Lua; ``cluster`` is
RedisBook on a 3-master Redis Cluster started on loopback ports for the session.

Each area (core, contract, redis, celery, web, cli, docs) has a folder, and a conftest
for the fixtures only it uses; helpers are in ``tests/support``. tests/README.md maps it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from asyncbook import AsyncBook, MemoryBook, RedisBook
from asyncbook.redis import _scripts

# REDIS_URL and the helpers are re-exported for a test file written before tests/support
# (``from .conftest import REDIS_URL``); new code imports them from tests.support.books.
from .support.books import REDIS_URL as REDIS_URL
from .support.books import BookFactory as BookFactory
from .support.books import delete_namespace as delete_namespace
from .support.books import kind_client
from .support.books import redis_client as redis_client
from .support.cluster import local_cluster, require_binaries
from .support.strict_keys import STRICT_PRELUDE
from .support.worker_start import guard_worker_starts, terminate_flag_left, thread_stacks

BOOK_KINDS = ["memory", "redis", "fakeredis", "cluster"]


@pytest.fixture(autouse=True)
def strict_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every book script a test registers runs strict: a key outside KEYS raises."""
    shared = _scripts._lua

    def strict_lua(name: str) -> str:
        source = shared(name)
        return f"{STRICT_PRELUDE}\n{source}" if name == _scripts.FIRST_HELPER else source

    monkeypatch.setattr(_scripts, "_lua", strict_lua)


@pytest.fixture(autouse=True, scope="session")
def worker_starts_guarded() -> Iterator[None]:
    """A test worker that never gets ready fails within a minute, with its stack and the
    error it logged (``tests/support/worker_start``), instead of hanging the test."""
    with guard_worker_starts():
        yield


@pytest.fixture(autouse=True)
def worker_shutdown_finished() -> Iterator[None]:
    """A test whose worker thread did not end within its shutdown timeout fails, and the
    tests after it start their workers as usual (``terminate_flag_left``)."""
    yield
    if terminate_flag_left():
        pytest.fail(
            "a test worker's thread outlived its shutdown timeout (Celery's "
            f"should_terminate was left set: cleared); threads:\n{thread_stacks()}"
        )


@pytest.fixture(scope="session")
def cluster_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a local 3-master Redis Cluster, up for the whole session."""
    require_binaries()
    with local_cluster(tmp_path_factory.mktemp("cluster")) as ports:
        yield f"redis+cluster://127.0.0.1:{ports[0]}"


@pytest.fixture
def namespace() -> str:
    """A namespace no other test uses."""
    return f"test-{uuid.uuid4().hex[:12]}"


SHARDED_KINDS = ["redis-s4", "cluster-s16"]
"""Sharded namespaces (issue 20): four shards on the local Redis, sixteen on the local
3-master Cluster. The contract tests run over these too (tests/contract/conftest.py)."""


def book_factories(
    request: pytest.FixtureRequest, kind: str, namespace: str
) -> Iterator[BookFactory]:
    """Books of one kind (``BOOK_KINDS``, ``SHARDED_KINDS``), cleaned up afterwards."""
    if kind == "memory":

        def memory_factory(**kwargs: Any) -> AsyncBook:
            return MemoryBook(**kwargs)

        yield memory_factory
        return
    shards = {"redis-s4": 4, "cluster-s16": 16}.get(kind, 1)
    client = kind_client(request, kind)

    def redis_factory(**kwargs: Any) -> AsyncBook:
        if shards != 1:
            kwargs.setdefault("shards", shards)
        return RedisBook(client, namespace=namespace, **kwargs)

    yield redis_factory
    delete_namespace(client, namespace)
    client.close()


@pytest.fixture(params=BOOK_KINDS)
def make_book(request: pytest.FixtureRequest, namespace: str) -> Iterator[BookFactory]:
    """Build books of one kind; each test gets its own, cleaned up afterwards."""
    yield from book_factories(request, request.param, namespace)


@pytest.fixture
def book(make_book: BookFactory) -> AsyncBook:
    """One book with the default settings."""
    return make_book()
