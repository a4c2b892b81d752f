"""The CLI area's fixture: ``book``, a RedisBook of the test's namespace on the CLI tests'
Redis (``CLI_REDIS_URL``, db 15), removed afterwards. ``run`` (the command through click's
runner, on that book) is in ``tests/support/cli.py``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from asyncbook import RedisBook

from ..support.books import delete_namespace
from ..support.cli import CLI_REDIS_URL


@pytest.fixture
def book(namespace: str) -> Iterator[RedisBook]:
    """A RedisBook of the test's namespace on the CLI tests' Redis."""
    client = redis.Redis.from_url(CLI_REDIS_URL)
    yield RedisBook(client, namespace=namespace)
    delete_namespace(client, namespace)
    client.close()
