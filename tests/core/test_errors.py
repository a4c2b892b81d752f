"""The error hierarchy: input refusals, unknown tasks and outages are told apart."""

from __future__ import annotations

import importlib
import inspect
import pickle
import pkgutil
from collections.abc import Callable

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

import asyncbook
import asyncbook.errors
from asyncbook import (
    ArtifactError,
    AsyncBookError,
    BookUnavailableError,
    DamagedRecordError,
    NotReplicatedError,
    RedisBook,
    UnknownTaskError,
    UnsupportedServerError,
)
from asyncbook._queues import BrokerUnreadableError
from asyncbook._sinks import PermanentSinkError, SinkError
from asyncbook.celery import (
    DuplicateRun,
    OverLimit,
    SettingsError,
    TaskCancelled,
    TaskEndedInBook,
    TaskExpired,
)
from asyncbook.celery._celery_seam import CelerySeamError
from asyncbook.cli._demo_app import TransientError
from asyncbook.errors import invalid, task_exists
from asyncbook.redis import RedisUnavailableError
from asyncbook.web._groups import UnknownGroupError

from ..support.servers import free_port


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


# One of each exception class the package defines, as the package raises it.
SAMPLES: list[BaseException] = [
    invalid("progress must be at most 100", field="progress"),
    task_exists("t-1"),
    AsyncBookError("conflict", "plain"),
    UnknownTaskError("t-1"),
    BookUnavailableError("down"),
    DamagedRecordError("t-1", "no history"),
    ArtifactError("s3://b/k", "its bytes do not match sha256:00"),
    UnsupportedServerError("redis 6.2.14", "Redis 7.0 or newer"),
    NotReplicatedError(1, 0, 1000),
    RedisUnavailableError("the book's Redis did not answer"),
    UnknownGroupError("g-1"),
    TaskCancelled("t-1", "user left"),
    DuplicateRun("t-1", "a live attempt holds it"),
    OverLimit("t-1", "key:acme runs 2"),
    TaskExpired("task t-1 ended after its deadline: it expired"),
    TaskEndedInBook("task t-1 had already ended failed"),
    SettingsError("asyncbook: asyncbook_shards must be ... (fix asyncbook_shards)"),
    SinkError("http://sink answered 500"),
    PermanentSinkError("http://sink: request refused: a header no request may carry"),
    BrokerUnreadableError("cannot read the broker: connection refused"),
    TransientError("upstream busy (attempt 1)"),  # the demo's task retries on it
    CelerySeamError("Celery's store_result wrote no meta for task t-1 through set()"),
]


def _defined_exceptions() -> set[type[BaseException]]:
    """Every exception class defined in a module of the package."""
    found: set[type[BaseException]] = set()
    for module in pkgutil.walk_packages(asyncbook.__path__, "asyncbook."):
        if module.name.endswith(("__main__", "asyncbook.progress", "asyncbook.signals")):
            continue  # a program, and two deprecated aliases that warn when imported
        loaded = importlib.import_module(module.name)
        for _, value in inspect.getmembers(loaded, inspect.isclass):
            if issubclass(value, BaseException) and value.__module__.startswith("asyncbook"):
                found.add(value)
    return found


def test_the_samples_cover_every_exception_class_of_the_package() -> None:
    assert _defined_exceptions() == {type(error) for error in SAMPLES}


@pytest.mark.parametrize("error", SAMPLES, ids=lambda error: type(error).__name__)
def test_every_error_survives_pickling_and_rebuilding_from_its_args(
    error: BaseException,
) -> None:
    # pickle: a prefork pool sends the exception to its main process. type(...)(*args):
    # how Celery's JSON result serializer rebuilds it.
    for copy in (pickle.loads(pickle.dumps(error)), type(error)(*error.args)):
        assert type(copy) is type(error)
        assert str(copy) == str(error)
        assert vars(copy) == vars(error)
        for name in ("code", "message", "field"):
            assert getattr(copy, name, None) == getattr(error, name, None)
