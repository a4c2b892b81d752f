"""The error hierarchy: input refusals, unknown tasks and outages are told apart."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

import asyncbook.errors
from asyncbook import (
    AsyncBookError,
    BookUnavailableError,
    DamagedRecordError,
    RedisBook,
    UnknownTaskError,
)
from asyncbook.redis import RedisUnavailableError

from .servers import free_port


def test_every_error_is_an_asyncbook_error_with_a_code() -> None:
    assert UnknownTaskError("t").code == "invalid-request"
    assert BookUnavailableError("down").code == "unavailable"
    damaged = DamagedRecordError("t", "no history")
    assert (damaged.code, damaged.task_id) == ("damaged", "t")
    assert "'t'" in damaged.message
    assert "no history" in damaged.message
    for kind in (UnknownTaskError, BookUnavailableError, DamagedRecordError):
        assert issubclass(kind, AsyncBookError)


def test_the_hierarchy_is_drawn_in_the_module_docstring() -> None:
    doc = asyncbook.errors.__doc__ or ""
    for name in asyncbook.errors.__all__:
        if name != "ErrorCode":
            assert name in doc, name


def test_an_unreachable_redis_raises_book_unavailable_also_a_redis_connection_error() -> None:
    client = redis.Redis(
        host="127.0.0.1",
        port=free_port(),
        socket_connect_timeout=0.5,
        retry=Retry(NoBackoff(), 0),
    )
    book = RedisBook(client, namespace="errors-unreachable")
    calls: list[Callable[[], object]] = [
        lambda: book.get("t"),
        lambda: book.create(id="t", now_ms=0, ttl_ms=10, max_attempts=1),
        lambda: book.apply("t", {"type": "expire", "atMs": 1}),
        lambda: book.apply_many([("t", {"type": "expire", "atMs": 1}, None)]),
        lambda: book.resume("t", 0),
        lambda: book.deliver_result("t", "k", 1),
        lambda: book.overdue(1),
        lambda: book.count_by_state(),
    ]
    for call in calls:
        with pytest.raises(RedisUnavailableError) as caught:
            call()
        assert isinstance(caught.value, BookUnavailableError)
        assert isinstance(caught.value, redis.ConnectionError)
        assert caught.value.code == "unavailable"
    client.close()
