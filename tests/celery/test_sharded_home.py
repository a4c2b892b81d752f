"""The home-shard rule of the integration's callback ids (issue 31): the Celery layer
knows its id format (``celery:<task id>:...``) and gives its rule, ``celery_home``, to
every book it builds, so each callback is claimed in its own task's shard; the Redis
layer's default rule knows no Celery."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from celery import Celery

from asyncbook import RedisBook
from asyncbook.celery import async_book_of, book_of, celery_home, install, uninstall
from asyncbook.celery._tracking import callback_id
from asyncbook.redis import AsyncShardedRedisBook, ShardedRedisBook, prefix_home
from asyncbook.redis._shards import ShardMap

from ..support.celery import CELERY_URL, memory_app

pytestmark = pytest.mark.redis

SHARDS = 4


def test_celery_callback_ids_live_with_the_task_they_name() -> None:
    assert celery_home("celery:abc:success:0") == "abc"
    assert celery_home(callback_id("abc", "progress", 0, 40, "n")) == "abc"
    # Any other id as the generic rule homes it.
    assert celery_home("abc:k") == "abc"
    assert celery_home("plain") == "plain"
    assert celery_home(":x") == ":x"
    assert celery_home("celery::x") == prefix_home("celery::x") == "celery"
    shards = ShardMap("ns", 16, celery_home)
    assert shards.home_index("celery:abc:success:0") == shards.index_of("abc")
    # Keys are the client's, never Celery's: the generic rule, whatever the book's.
    assert shards.key_index("celery:abc:k") == shards.index_of("celery")


def _task_not_in_celerys_shard(shards: ShardMap, prefix: str = "task") -> str:
    return next(
        task
        for task in (f"{prefix}-{i}" for i in range(100))
        if shards.index_of(task) != shards.index_of("celery")
    )


def _claimed_in(client: redis.Redis, book: ShardedRedisBook, callback: str) -> list[int]:
    return [
        i for i, shard in enumerate(book.ns.shards) if client.exists(shard.keys.callback(callback))
    ]


def test_the_celery_rule_claims_a_callback_in_its_tasks_shard(
    client: redis.Redis, namespace: str
) -> None:
    celery_book = RedisBook.from_url(
        CELERY_URL, namespace=namespace, shards=SHARDS, home_of=celery_home
    )
    assert isinstance(celery_book, ShardedRedisBook)
    shards = celery_book.map
    task = _task_not_in_celerys_shard(shards)
    celery_book.create(id=task, now_ms=0, ttl_ms=60_000, max_attempts=1)
    start = {"type": "start", "atMs": 1, "worker": "w"}
    callback = callback_id(task, "start", 0)
    assert celery_book.apply(task, start, callback).reason == "started"
    assert _claimed_in(client, celery_book, callback) == [shards.index_of(task)]
    assert celery_book.apply(task, start, callback).duplicate_callback

    # The generic default: the same id homed in the shard of "celery", claimed there.
    generic = RedisBook.from_url(CELERY_URL, namespace=namespace, shards=SHARDS)
    assert isinstance(generic, ShardedRedisBook)
    other = _task_not_in_celerys_shard(shards, "other")
    generic.create(id=other, now_ms=0, ttl_ms=60_000, max_attempts=1)
    foreign = callback_id(other, "start", 0)
    assert generic.apply(other, start, foreign).reason == "started"
    assert shards.index_of("celery") in _claimed_in(client, generic, foreign)


@pytest.fixture
def installed_app(namespace: str) -> Iterator[Celery]:
    app = memory_app(
        "home",
        asyncbook_redis_url=CELERY_URL,
        asyncbook_namespace=namespace,
        asyncbook_shards=SHARDS,
    )
    install(app)
    yield app
    uninstall(app)


def test_every_book_the_integration_builds_homes_callbacks_by_its_rule(
    installed_app: Celery,
) -> None:
    book = book_of(installed_app)
    assert isinstance(book, ShardedRedisBook)
    assert book.map.home_of is celery_home
    twin = async_book_of(installed_app)
    assert isinstance(twin, AsyncShardedRedisBook)
    assert twin.map.home_of is celery_home
