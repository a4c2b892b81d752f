"""The test Redis and the books on it: its URL, a client that fails the test when the
server does not answer, and removing one namespace's keys afterwards."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
import redis

from asyncbook import AsyncBook

BookFactory = Callable[..., AsyncBook]
"""What the ``make_book`` fixture gives: keyword settings in, a fresh book of one kind out."""

REDIS_URL = os.environ.get("ASYNCBOOK_TEST_REDIS_URL", "redis://127.0.0.1:6379/10")


def redis_client(url: str = REDIS_URL) -> redis.Redis:
    """A client on the test Redis; fails the test when Redis does not answer."""
    client = redis.Redis.from_url(url)
    try:
        client.ping()
    except redis.ConnectionError as error:  # pragma: no cover - environment problem
        pytest.fail(f"Redis at {url} does not answer ({error}); .ci/run starts one")
    return client


def delete_namespace(client: Any, namespace: str) -> None:
    """Remove every key of one namespace (its keys share the hash tag {namespace})."""
    keys = list(client.scan_iter(match="{" + namespace + "}:*", count=1000))
    for start in range(0, len(keys), 500):
        client.delete(*keys[start : start + 500])
