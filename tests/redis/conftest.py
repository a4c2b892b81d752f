"""The Redis area's fixtures, on the test Redis (``REDIS_URL``, db 10):

- ``client``: a client for the test; afterwards the test's ``namespace`` is removed;
- ``book``: a RedisBook of the test's ``namespace`` on ``client``.

They replace the root conftest's ``book`` (every book kind) here: these modules test
RedisBook itself. A module on several servers (fakeredis, the Cluster) defines its own.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from asyncbook import RedisBook

from ..support.books import delete_namespace, redis_client


@pytest.fixture
def client(namespace: str) -> Iterator[redis.Redis]:
    """A client on the test Redis; the test's namespace is removed afterwards."""
    client = redis_client()
    yield client
    delete_namespace(client, namespace)
    client.close()


@pytest.fixture
def book(client: redis.Redis, namespace: str) -> RedisBook:
    """A RedisBook of the test's namespace on the test Redis."""
    return RedisBook(client, namespace=namespace)
