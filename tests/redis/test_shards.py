"""Sharded namespaces (issue 20): the shard count fixed at first use, the layout, and
global callback ids and idempotency keys claimed across shards by many processes."""

from __future__ import annotations

import multiprocessing
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from asyncbook import AsyncBookError, RedisBook
from asyncbook.redis import (
    AsyncRedisBook,
    AsyncShardedRedisBook,
    ShardedRedisBook,
    prefix_home,
    stored_shards,
)
from asyncbook.redis._keys import shard_tag
from asyncbook.redis._shards import ShardMap

from ..support.books import REDIS_URL, delete_namespace, redis_client


@pytest.fixture
def client() -> Iterator[redis.Redis]:
    client = redis_client()
    yield client
    client.close()


@pytest.fixture
def fresh(client: redis.Redis) -> Iterator[str]:
    namespace = f"shards-{uuid.uuid4().hex[:12]}"
    yield namespace
    delete_namespace(client, namespace)


def _start(at: int) -> dict[str, Any]:
    return {"type": "start", "atMs": at, "worker": "w"}


def test_shards_above_one_make_a_sharded_book(client: redis.Redis, fresh: str) -> None:
    book = RedisBook(client, namespace=fresh, shards=4)
    assert isinstance(book, ShardedRedisBook)
    assert isinstance(book, RedisBook)
    assert type(RedisBook(client, namespace=fresh)) is RedisBook
    assert type(RedisBook.from_url(REDIS_URL, namespace=fresh, shards=4)) is ShardedRedisBook


def test_the_count_is_stored_at_first_use_and_checked(client: redis.Redis, fresh: str) -> None:
    RedisBook(client, namespace=fresh, shards=4).create(
        id="a", now_ms=0, ttl_ms=1000, max_attempts=1
    )
    assert stored_shards(client, fresh) == 4
    with pytest.raises(AsyncBookError) as other:
        RedisBook(client, namespace=fresh, shards=8).create(
            id="b", now_ms=0, ttl_ms=1000, max_attempts=1
        )
    assert (other.value.code, other.value.field) == ("conflict", "shards")
    with pytest.raises(AsyncBookError) as one:
        RedisBook(client, namespace=fresh).create(id="b", now_ms=0, ttl_ms=1000, max_attempts=1)
    assert (one.value.code, one.value.field) == ("conflict", "shards")
    assert "shards=4" in one.value.message


def test_a_one_shard_namespace_with_tasks_is_not_resharded(client: redis.Redis, fresh: str) -> None:
    RedisBook(client, namespace=fresh).create(id="a", now_ms=0, ttl_ms=1000, max_attempts=1)
    with pytest.raises(AsyncBookError) as refused:
        RedisBook(client, namespace=fresh, shards=4).create(
            id="b", now_ms=0, ttl_ms=1000, max_attempts=1
        )
    assert (refused.value.code, refused.value.field) == ("conflict", "shards")
    assert stored_shards(client, fresh) == 1


def test_one_shard_keeps_the_one_tag_layout(client: redis.Redis, fresh: str) -> None:
    book = RedisBook(client, namespace=fresh)
    book.create(id="a", now_ms=0, ttl_ms=1000, max_attempts=1)
    book.apply("a", _start(1), "cb")
    keys = {k.decode() for k in client.scan_iter(match=f"*{fresh}*")}
    assert keys
    assert all(key.startswith("{" + fresh + "}:") for key in keys)
    assert "{" + fresh + "}:shards" not in keys


READS: list[tuple[str, tuple[Any, ...]]] = [
    ("get", ("t3",)),
    ("info", ("t3",)),
    ("resume", ("t3", 0)),
    ("list_tasks", ()),
    ("count_by_state", ()),
    ("transition_counts", ()),
    ("overdue_count", (10**12,)),
    ("overdue", (10**12,)),
    ("search", ()),
    ("stats", ()),
    ("workers", ()),
    ("task_names", ()),
    ("name_totals", ()),
    ("gauges", (0,)),
    ("group", ("g",)),
    ("group_members", ("g",)),
    ("audit", ()),
    ("last_cursor", ("t3",)),
]
"""Reads of every kind: one task's, merged over the shards, the console's, groups'."""


def _refused(call: Any, *args: Any) -> AsyncBookError:
    with pytest.raises(AsyncBookError) as refused:
        call(*args)
    assert (refused.value.code, refused.value.field) == ("conflict", "shards")
    return refused.value


@pytest.fixture
def four(client: redis.Redis, fresh: str) -> str:
    """A four-shard namespace of twenty tasks (of group g)."""
    book = RedisBook(client, namespace=fresh, shards=4)
    for n in range(20):
        book.create(id=f"t{n}", now_ms=n, ttl_ms=60_000, max_attempts=1, group_id="g")
    return fresh


@pytest.mark.parametrize("shards", [None, 1, 2, 8])
def test_every_read_with_another_count_is_refused(
    client: redis.Redis, four: str, shards: int | None
) -> None:
    """Reads of a book of another count answered for the wrong shards (2 shards listed 5
    of 20 tasks, one shard counted zeros): they are refused as writes are, naming the
    stored count, whether the count was given or not (``from_url`` as the constructor)."""
    given: dict[str, Any] = {} if shards is None else {"shards": shards}
    for book in (
        RedisBook(client, namespace=four, **given),
        RedisBook.from_url(REDIS_URL, namespace=four, **given),
    ):
        for name, args in READS:
            error = _refused(getattr(book, name), *args)
            assert "has 4 shards; open it with shards=4" in error.message, name
        assert RedisBook(client, namespace=four, shards=4).count_by_state()["queued"] == 20


def test_a_book_opened_before_the_first_write_sees_the_count_it_stores(
    client: redis.Redis, fresh: str
) -> None:
    early = RedisBook(client, namespace=fresh)
    assert early.count_by_state()["queued"] == 0  # nothing stored yet: nothing to refuse
    RedisBook(client, namespace=fresh, shards=4).create(
        id="a", now_ms=0, ttl_ms=1000, max_attempts=1
    )
    _refused(early.count_by_state)
    _refused(early.get, "a")


def test_the_count_is_read_until_the_namespace_settles_it(client: redis.Redis, fresh: str) -> None:
    one = RedisBook(client, namespace=fresh)
    one.count_by_state()
    assert not one.shard_check.settled  # a namespace not used yet
    one.create(id="a", now_ms=0, ttl_ms=1000, max_attempts=1)
    one.get("a")
    assert one.shard_check.settled  # one shard holding tasks: no more reads of the count
    sharded = RedisBook(client, namespace=f"{fresh}-4", shards=4)
    try:
        assert isinstance(sharded, ShardedRedisBook)
        sharded.create(id="a", now_ms=0, ttl_ms=1000, max_attempts=1)
        assert sharded.shard_check.settled
        _refused(RedisBook(client, namespace=fresh, shards=4).list_tasks)
    finally:
        delete_namespace(client, f"{fresh}-4")


@pytest.mark.parametrize("bad", [0, -1, 1025, "4", 2.0, True])
def test_bad_shard_counts_name_the_field(client: redis.Redis, bad: Any) -> None:
    with pytest.raises(AsyncBookError) as refused:
        RedisBook(client, namespace="x", shards=bad)
    assert (refused.value.code, refused.value.field) == ("invalid-request", "shards")


def test_shard_tags_spread_over_the_slot_ranges() -> None:
    for total in (4, 16, 64):
        for index in range(total):
            tag = shard_tag("jobs", index, total)
            low = index * REDIS_CLUSTER_HASH_SLOTS // total
            assert low <= key_slot(tag.encode()) < (index + 1) * REDIS_CLUSTER_HASH_SLOTS // total
    assert shard_tag("jobs", 3, 16) == shard_tag("jobs", 3, 16)  # stable


def test_ids_live_with_the_task_they_name() -> None:
    # Celery's ids (celery:<id>:...) are homed by the integration's rule: tests/celery.
    assert prefix_home("abc:k") == "abc"
    assert prefix_home("plain") == "plain"
    assert prefix_home(":x") == ":x"
    shards = ShardMap("ns", 16)
    assert shards.home_index("abc:success:0") == shards.index_of("abc")
    assert shards.key_index("abc:k") == shards.index_of("abc")


def test_the_redis_layer_knows_no_celery_id_format() -> None:
    shards = ShardMap("ns", 16)
    assert prefix_home("celery:abc:success:0") == "celery"
    assert shards.home_index("celery:abc:success:0") == shards.index_of("celery")


def _reverse_home(identifier: str) -> str:
    """A rule of a test's own: the id's text after its last colon."""
    return identifier.rpartition(":")[2]


def test_a_book_homes_callback_ids_by_its_rule_and_keys_by_the_prefix() -> None:
    shards = ShardMap("ns", 16, _reverse_home)
    assert shards.home_index("step:abc") == shards.index_of("abc")
    assert shards.key_index("step:abc") == shards.index_of("step")  # keys: the client's


def test_a_books_rule_claims_its_callback_ids_where_it_says(
    client: redis.Redis, fresh: str
) -> None:
    book = RedisBook(client, namespace=fresh, shards=4, home_of=_reverse_home)
    assert isinstance(book, ShardedRedisBook)
    assert book.map.home_of is _reverse_home
    home = next(h for h in (f"h{i}" for i in range(100)) if book.map.index_of(h) != 0)
    task = next(t for t in (f"t{i}" for i in range(100)) if book.map.index_of(t) == 0)
    book.create(id=task, now_ms=0, ttl_ms=1000, max_attempts=1)
    callback = f"step:{home}"
    assert book.apply(task, _start(1), callback).reason == "started"
    claimed = [
        i for i, shard in enumerate(book.ns.shards) if client.exists(shard.keys.callback(callback))
    ]
    assert book.map.index_of(home) in claimed
    assert book.apply(task, _start(1), callback).duplicate_callback
    twin = AsyncRedisBook.twin_of(book)  # the asyncio twin homes them alike
    assert isinstance(twin, AsyncShardedRedisBook)
    assert twin.map.home_of is _reverse_home


def test_an_apply_that_raises_releases_its_claim(client: redis.Redis, fresh: str) -> None:
    book = RedisBook(client, namespace=fresh, shards=4)
    assert isinstance(book, ShardedRedisBook)
    book.create(id="a", now_ms=0, ttl_ms=1000, max_attempts=1)
    callback = next(
        c
        for c in (f"cb{i}" for i in range(100))
        if book.map.home_index(c) != book.map.index_of("a")
    )
    with pytest.raises(AsyncBookError):
        book.apply("missing", _start(1), callback)
    assert book.apply("a", _start(1), callback).reason == "started"
    assert book.apply("a", _start(1), callback).duplicate_callback


def _race_apply(namespace: str, task_id: str, callback: str, out: Any) -> None:
    book = RedisBook.from_url(REDIS_URL, namespace=namespace, shards=4)
    out.put((task_id, book.apply(task_id, _start(1), callback).duplicate_callback))


def _race_deliver(namespace: str, task_id: str, key: str, out: Any) -> None:
    book = RedisBook.from_url(REDIS_URL, namespace=namespace, shards=4)
    out.put((task_id, book.deliver_result(task_id, key, 5).reason))


def _tasks_in_other_shards(book: RedisBook, identifier: str, count: int) -> list[str]:
    assert isinstance(book, ShardedRedisBook)
    home = book.map.home_index(identifier)
    ids = (f"t{i}" for i in range(10_000))
    return [task_id for task_id in ids if book.map.index_of(task_id) != home][:count]


@pytest.mark.long
def test_concurrent_claims_from_processes_take_one_id_once(client: redis.Redis, fresh: str) -> None:
    """Eight processes apply one callback id to eight tasks (none in the id's shard) at
    once: exactly one applies it; the others answer duplicate-callback."""
    book = RedisBook(client, namespace=fresh, shards=4)
    callback = "shared"
    tasks = _tasks_in_other_shards(book, callback, 8)
    for task_id in tasks:
        book.create(id=task_id, now_ms=0, ttl_ms=10_000, max_attempts=1)
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    workers = [context.Process(target=_race_apply, args=(fresh, t, callback, out)) for t in tasks]
    for worker in workers:
        worker.start()
    answers = [out.get(timeout=60) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
    applied = [task_id for task_id, duplicate in answers if not duplicate]
    assert len(applied) == 1
    started = [t for t in tasks if (found := book.get(t)) is not None and found.state == "running"]
    assert started == applied


@pytest.mark.long
def test_concurrent_deliveries_from_processes_use_one_key_once(
    client: redis.Redis, fresh: str
) -> None:
    book = RedisBook(client, namespace=fresh, shards=4)
    key = "receipt-key"
    tasks = _tasks_in_other_shards(book, key, 6)
    for task_id in tasks:
        book.create(id=task_id, now_ms=0, ttl_ms=10_000, max_attempts=1)
        book.apply(task_id, _start(1))
        book.apply(task_id, {"type": "succeed", "atMs": 2, "resultRef": "r", "resultHash": "h"})
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    workers = [context.Process(target=_race_deliver, args=(fresh, t, key, out)) for t in tasks]
    for worker in workers:
        worker.start()
    answers = [out.get(timeout=60) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
    reasons = sorted(reason for _task, reason in answers)
    assert reasons == ["delivered"] + ["key-reused-for-other-task"] * 5


BASE_TAG_METHODS = {
    "now_ms",
    "claim_sweep",
    "record_sweep",
    "last_sweep_ms",
    "check_eviction_policy",
    "extra_script",
    "events_script",
}
"""RedisBook methods a sharded book may run on the namespace's own tag: the clock, the
sweep's lease and time, and registering a caller's script (re-registered per shard)."""


def test_a_sharded_book_overrides_every_call_that_reads_or_writes_tasks() -> None:
    """A RedisBook method not overridden would run on the namespace's own tag, where a
    sharded namespace keeps no tasks: every public one is overridden or known safe."""
    public = {
        name
        for name, value in vars(RedisBook).items()
        if callable(value)
        and not isinstance(value, type)
        and not name.startswith("_")
        and name != "from_url"
    }
    missing = public - set(vars(ShardedRedisBook)) - BASE_TAG_METHODS
    assert not missing


def _masters_by_slot(cluster_url: str) -> list[tuple[int, int, int]]:
    """The cluster's slot map as the test reads it itself: (low, high, master port)."""
    node = redis.Redis(port=int(cluster_url.rsplit(":", 1)[1]))
    try:
        ranges = node.cluster("slots")
    finally:
        node.close()
    return [(int(low), int(high), int(master[1])) for low, high, master, *_ in ranges]


@pytest.mark.parametrize("name", ["spread-3", "spread-11", "random"])
def test_sixteen_shards_spread_over_the_three_masters(
    cluster_url: str, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Each shard is on the master its tag's slot is on, by the slot map read here: 16
    equal slot ranges over 3 masters leave two ranges across a master's edge, so a
    namespace's masters hold 5, 5, 6 shards or 4, 6, 6 ("spread-3" is one of those, as
    about one random namespace in eight is): never another split."""
    namespace = f"spread-{uuid.uuid4().hex[:12]}" if name == "random" else name
    book = RedisBook.from_url(cluster_url, namespace=namespace, shards=16)
    assert isinstance(book, ShardedRedisBook)
    try:
        with caplog.at_level("INFO", logger="asyncbook.redis._book"):
            book.check_server()
        slots = _masters_by_slot(cluster_url)
        expected: dict[int, list[int]] = {}
        for index, shard in enumerate(book.ns.shards):
            slot = key_slot(shard.keys.tag.encode())
            port = next(port for low, high, port in slots if low <= slot <= high)
            expected.setdefault(port, []).append(index)
        nodes = {int(node.rsplit(":", 1)[1]): ids for node, ids in book.shard_map().items()}
        assert nodes == expected
        assert len(nodes) == 3
        assert sorted(len(ids) for ids in nodes.values()) in ([5, 5, 6], [4, 6, 6])
        assert sorted(i for ids in nodes.values() for i in ids) == list(range(16))
        assert "has 16 shards" in caplog.text
    finally:
        delete_namespace(book.client, namespace)
        book.client.close()
