"""The web area's fixtures: a status server over a fresh RedisBook namespace on the test
Redis (``server``) and an HTTP client on it (``client``), one each per test; ``queue``, a
broker queue of the test's own for retries (``sent`` of ``tests/support/retries.py``
reads it).

A module that needs another server (a token, module scope, a book filled first) defines
its own ``server``; ``client`` then talks to that one. The helpers (``running_server``,
``read_sse``, ``assert_error``) are in ``tests/support/web_server.py``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest
import redis

from ..support.web_server import WEB_REDIS_URL, Running, running_server


@pytest.fixture
def server() -> Iterator[Running]:
    """A status server on a fresh namespace, stopped and cleaned up after the test."""
    with running_server() as running:
        yield running


@pytest.fixture
def client(server: Running) -> Iterator[httpx.Client]:
    """An HTTP client on ``server``."""
    with httpx.Client(base_url=server.url, timeout=10) as http:
        yield http


@pytest.fixture
def queue() -> Iterator[str]:
    """A queue of the test's own on the broker (the web test Redis); emptied afterwards."""
    name = f"retry-q-{uuid.uuid4().hex[:12]}"
    yield name
    client = redis.Redis.from_url(WEB_REDIS_URL)
    for key in client.scan_iter(match=f"{name}*"):
        client.delete(key)
    client.close()
