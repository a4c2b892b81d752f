"""``AsyncRedisBook(..., shards=4)`` against ``RedisBook(..., shards=4)``: the same answers
and errors (real Redis, fakeredis and a Redis Cluster), callback ids and idempotency keys
claimed across shards, ``wait`` on a task's shard, the twin of a sharded book, and the
console's merged reads."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import fakeredis
import pytest
import redis
import redis.asyncio

from asyncbook import AsyncBook, AsyncBookError, PublishInfo, RedisBook
from asyncbook.redis import (
    AsyncRedisBook,
    AsyncShardedRedisBook,
    ShardedRedisBook,
    connect,
    connect_async,
)
from asyncbook.redis._shards import ShardMap

from ..support.books import REDIS_URL, delete_namespace, redis_client

SHARDS = 4
HOUR = 3_600_000
NOW = int(time.time() * 1000) - 60_000

_T = TypeVar("_T")


class Store:
    """One server: sharded sync books, and sharded async books on a client of the running
    loop."""

    def __init__(self, client: Any, async_client: Callable[[], Any]) -> None:
        self.client = client
        self.async_client = async_client
        self.namespaces: list[str] = []

    def sync(self, namespace: str) -> ShardedRedisBook:
        self.namespaces.append(namespace)
        book = RedisBook(self.client, namespace=namespace, shards=SHARDS)
        assert isinstance(book, ShardedRedisBook)
        return book

    def run(self, namespace: str, use: Callable[[AsyncShardedRedisBook], Awaitable[_T]]) -> _T:
        """``use(book)`` for a sharded async book of ``namespace``, in a loop of its own."""

        async def scenario() -> _T:
            book = AsyncRedisBook(self.async_client(), namespace=namespace, shards=SHARDS)
            assert isinstance(book, AsyncShardedRedisBook)
            async with book:
                return await use(book)

        return asyncio.run(scenario())


@pytest.fixture(params=["redis", "fakeredis", "cluster"])
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    if request.param == "redis":
        made = Store(redis_client(), lambda: redis.asyncio.Redis.from_url(REDIS_URL))
    elif request.param == "cluster":
        url = request.getfixturevalue("cluster_url")
        made = Store(connect(url), lambda: connect_async(url))
    else:
        server = fakeredis.FakeServer()
        made = Store(
            fakeredis.FakeRedis(server=server), lambda: fakeredis.aioredis.FakeRedis(server=server)
        )
    yield made
    for namespace in made.namespaces:
        delete_namespace(made.client, namespace)
    made.client.close()


def elsewhere(task_id: str, tag: str) -> str:
    """A callback id (or idempotency key) whose home is in another shard than ``task_id``."""
    shards = ShardMap("any", SHARDS)
    for n in range(100):
        identifier = f"other{n}:{tag}"
        if shards.home_index(identifier) != shards.index_of(task_id):
            return identifier
    raise AssertionError("no id in another shard")


IDS = ["q", "r", "s", "f", "a", "b", "e", "d"]
"""Task ids over every shard of four."""


def fill(book: ShardedRedisBook) -> None:
    """q, a, b, e, d queued; r running (40 %); s succeeded; f failed: some callback ids in
    their task's shard, some in another."""
    assert {book.map.index_of(task_id) for task_id in IDS} == set(range(SHARDS))
    info = PublishInfo(name="tasks.add", args="(1, 2)", kwargs="{}", queue="q")
    for n, task_id in enumerate(IDS):
        book.create(id=task_id, now_ms=NOW + n, ttl_ms=HOUR + n, max_attempts=1, info=info)
    for task_id in ("r", "s", "f"):
        book.apply(task_id, {"type": "start", "atMs": NOW + 10, "worker": "w1"}, f"{task_id}:s")
    book.apply("r", {"type": "progress", "atMs": NOW + 20, "progress": 40, "cursor": "c"})
    ok = {"type": "succeed", "atMs": NOW + 30, "resultRef": "ref", "resultHash": "h"}
    book.apply("s", ok, elsewhere("s", "end"))
    failure = {"type": "fail", "atMs": NOW + 40, "error": "boom", "retryable": False}
    book.apply("f", {**failure, "exception": "ValueError", "traceback": "tb"}, "f:e")


READS: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("get", ("s",), {}),
    ("get", ("nobody",), {}),
    ("get", (7,), {}),
    ("resume", ("r", 0), {}),
    ("resume", ("r", 99), {}),
    ("resume", ("r", "x"), {}),
    ("resume", ("nobody", 0), {}),
    ("list_tasks", (), {}),
    ("list_tasks", ("queued",), {"full_task": False}),
    ("list_tasks", (None, 3), {}),
    ("list_tasks", ("bogus",), {}),
    ("list_tasks", (None, 0), {}),
    ("list_tasks", (None, 5, "x"), {}),
    ("overdue", (NOW + 2 * HOUR, 3), {}),
    ("overdue", (NOW + 2 * HOUR,), {}),
    ("overdue", (-1,), {}),
    ("overdue_count", (NOW + 2 * HOUR,), {}),
    ("overdue_count", (NOW,), {}),
    ("last_sweep_ms", (), {}),
    ("count_by_state", (), {}),
    ("transition_counts", (), {}),
]

WRITES: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("cancel", ("q", "not needed"), {"at_ms": NOW + 50}),
    ("cancel", ("q",), {"at_ms": NOW + 50, "callback_id": elsewhere("q", "cancel")}),
    (
        "cancel",
        ("a",),
        {"at_ms": NOW + 50, "callback_id": elsewhere("a", "cancel"), "actor": "ana"},
    ),
    # Another task's id, applied already: a duplicate, and nothing written.
    ("cancel", ("b",), {"at_ms": NOW + 50, "callback_id": elsewhere("s", "end")}),
    ("cancel", ("s",), {"at_ms": NOW + 50}),
    ("cancel", ("nobody",), {"at_ms": NOW + 50, "callback_id": elsewhere("nobody", "x")}),
    ("cancel", ("r", 5), {"at_ms": NOW + 50}),
    ("deliver_result", ("s", "s:k", NOW), {}),
    ("deliver_result", ("s", elsewhere("s", "k"), NOW), {}),
    ("deliver_result", ("r", elsewhere("r", "k"), NOW), {}),
    ("deliver_result", ("nobody", elsewhere("nobody", "k"), NOW), {}),
    ("deliver_result", ("s", "", NOW), {}),
]


def answer(call: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """What ``call(*args, **kwargs)`` gave: its value, or its error's type, code, message
    and field."""
    try:
        return call(*args, **kwargs)
    except AsyncBookError as error:
        return (type(error), error.code, error.message, error.field)


async def answer_async(call: Awaitable[Any]) -> Any:
    """``answer`` of an awaited call."""
    try:
        return await call
    except AsyncBookError as error:
        return (type(error), error.code, error.message, error.field)


def test_reads_answer_as_the_sync_sharded_book(store: Store, namespace: str) -> None:
    sync_book = store.sync(namespace)
    fill(sync_book)
    expected = [answer(getattr(sync_book, m), *args, **kw) for m, args, kw in READS]

    async def calls(book: AsyncShardedRedisBook) -> list[Any]:
        return [await answer_async(getattr(book, m)(*args, **kw)) for m, args, kw in READS]

    got = store.run(namespace, calls)
    for case, mine, theirs in zip(READS, got, expected, strict=True):
        assert mine == theirs, case


def test_pages_continue_across_shards(store: Store, namespace: str) -> None:
    sync_book = store.sync(namespace)
    fill(sync_book)

    async def pages(book: AsyncShardedRedisBook) -> list[list[str]]:
        found: list[list[str]] = []
        after = None
        while True:
            page = await book.list_tasks(limit=3, after=after, full_task=False)
            found.append([task.id for task in page.tasks])
            if page.next_after is None:
                return found
            after = page.next_after

    assert store.run(namespace, pages) == [["d", "e", "b"], ["a", "f", "s"], ["r", "q"]]


def test_writes_answer_as_the_sync_sharded_book(store: Store, namespace: str) -> None:
    """Each write in turn, on a namespace of each book filled alike; then both read back
    alike (every task, and the audit of the audited cancel)."""
    sync_book = store.sync(namespace + "-sync")
    fill(sync_book)
    fill(store.sync(namespace + "-async"))
    expected = [answer(getattr(sync_book, m), *args, **kw) for m, args, kw in WRITES]

    async def calls(book: AsyncShardedRedisBook) -> list[Any]:
        return [await answer_async(getattr(book, m)(*args, **kw)) for m, args, kw in WRITES]

    assert store.run(namespace + "-async", calls) == expected

    async def read_back(book: AsyncShardedRedisBook) -> list[Any]:
        tasks = [await book.get(task_id) for task_id in IDS]
        return [*tasks, [entry.actor for entry in await book.audit("a")]]

    assert store.run(namespace + "-async", read_back) == [
        *(sync_book.get(task_id) for task_id in IDS),
        ["ana"],
    ]


def test_a_claim_released_by_a_refused_cancel_is_free_again(store: Store, namespace: str) -> None:
    sync_book = store.sync(namespace)
    fill(sync_book)
    callback = elsewhere("nobody", "x")

    async def scenario(book: AsyncShardedRedisBook) -> Any:
        with pytest.raises(AsyncBookError) as caught:
            await book.cancel("nobody", callback_id=callback)
        assert caught.value.code == "invalid-request"
        return await book.cancel("e", "mine now", callback_id=callback)

    answered = store.run(namespace, scenario)
    assert (answered.changed, answered.task.state) == (True, "cancelled")


def test_the_shard_count_is_stored_and_checked(store: Store, namespace: str) -> None:
    async def first(book: AsyncShardedRedisBook) -> Any:
        return await book.check_server()

    store.sync(namespace)  # cleaned up afterwards
    store.run(namespace, first)

    async def other_count() -> None:
        async with AsyncRedisBook(store.async_client(), namespace=namespace, shards=2) as book:
            await book.cancel("q")

    with pytest.raises(AsyncBookError) as caught:
        asyncio.run(other_count())
    assert (caught.value.code, caught.value.field) == ("conflict", "shards")


def test_wait_follows_the_tasks_shard(store: Store, namespace: str) -> None:
    sync_book = store.sync(namespace)
    fill(sync_book)
    ok = {"type": "succeed", "atMs": NOW + 500, "resultRef": "ref", "resultHash": "h"}

    async def scenario(book: AsyncShardedRedisBook) -> Any:
        async def finish() -> None:
            await asyncio.sleep(0.05)
            await asyncio.to_thread(sync_book.apply, "r", ok)

        writer = asyncio.create_task(finish())
        task = await book.wait("r", timeout=10)
        await writer
        return task

    task = store.run(namespace, scenario)
    assert task == sync_book.get("r")
    assert task.state == "succeeded"


def test_merged_reads_answer_as_the_sync_book(store: Store) -> None:
    """The console's reads, groups and the audit log merged by the async book (the sync
    book's merged plans, awaited) answer as the sync book."""
    namespace = f"merged-{uuid.uuid4().hex[:12]}"
    book = store.sync(namespace)
    for i in range(12):
        task_id = f"t{i}"
        book.create(
            id=task_id,
            now_ms=NOW,
            ttl_ms=HOUR,
            max_attempts=1,
            group_id="g" if i % 2 else None,
            info=PublishInfo(name=f"n{i % 3}", args="(1,)", queue="q"),
        )
        if i % 3:
            book.apply(task_id, {"type": "start", "atMs": NOW + i, "worker": f"w{i % 2}"})
        if i % 3 == 2:
            book.apply(
                task_id,
                {"type": "succeed", "atMs": NOW + 10 * i, "resultRef": "r", "resultHash": "h"},
            )
    book.seal_group("g", 6)
    book.cancel("t0", "no longer wanted", actor="ops")
    now = NOW + 60_000

    def reads(each: Any) -> list[Any]:
        return [
            each.search(),
            each.search(sort="-runtime", limit=3),
            each.search(q="n1"),
            each.workers(),
            each.stats(now_ms=now),
            each.stats("n2", now_ms=now),
            each.task_names(),
            each.name_totals(),
            each.gauges(now),
            each.group("g"),
            each.group_members("g"),
            each.audit(),
        ]

    expected = reads(book)

    async def merged(async_book: AsyncShardedRedisBook) -> list[Any]:
        return [await read for read in reads(async_book)]

    assert store.run(namespace, merged) == expected


def test_the_twin_of_a_sharded_book_is_sharded() -> None:
    namespace = f"twin-{uuid.uuid4().hex[:12]}"
    sync_book = RedisBook.from_url(REDIS_URL, namespace=namespace, shards=SHARDS)
    try:
        assert isinstance(sync_book, ShardedRedisBook)
        fill(sync_book)
        # Its async twin is sharded alike (the status server reads through it).
        any_book: AsyncBook = sync_book
        assert isinstance(any_book.async_twin(), AsyncRedisBook)
        twin = AsyncRedisBook.twin_of(sync_book)
        assert isinstance(twin, AsyncShardedRedisBook)
        assert (twin.namespace, twin.shards) == (namespace, SHARDS)

        async def read() -> Any:
            async with twin:
                return [await twin.get(task_id) for task_id in IDS], await twin.info("f")

        tasks, info = asyncio.run(read())
        assert tasks == [sync_book.get(task_id) for task_id in IDS]
        assert info is not None
        assert info.name == "tasks.add"
    finally:
        delete_namespace(sync_book.client, namespace)
        sync_book.client.close()


GROUP = [f"member-{n}" for n in range(8)]
"""Eight members of one group, over every shard of four."""


def cancels(task_id: str, n: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The n-th member's cancel: plain, with a callback id of its shard, with one of
    another shard, audited; every way a cancel goes through a sharded book."""
    at: dict[str, Any] = {"at_ms": NOW + 100 + n}
    kinds: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        ((task_id, "stop"), at),
        ((task_id,), {**at, "callback_id": f"{task_id}:cancel"}),
        ((task_id, "stop"), {**at, "callback_id": elsewhere(task_id, "cancel")}),
        ((task_id,), {**at, "actor": "ana"}),
    ]
    return kinds[n % 4]


def test_a_group_ended_through_the_async_book_is_notified_as_by_the_sync_one(
    store: Store, namespace: str
) -> None:
    """A sealed group of eight over four shards, each member cancelled (every kind of
    cancel): the async book writes the one group notification the sync book writes."""
    names = {"sync": namespace + "-sync", "async": namespace + "-async"}
    for name in names.values():
        book = store.sync(name)
        assert {book.map.index_of(task_id) for task_id in GROUP} == set(range(SHARDS))
        for n, task_id in enumerate(GROUP):
            book.create(id=task_id, now_ms=NOW + n, ttl_ms=HOUR, max_attempts=1, group_id="g")
        book.seal_group("g", len(GROUP))
    sync_book = store.sync(names["sync"])
    for n, task_id in enumerate(GROUP):
        args, kwargs = cancels(task_id, n)
        assert sync_book.cancel(*args, **kwargs).changed
    expected = sync_book.drain_group_notifications()
    assert len(expected) == 1

    async def end_each(book: AsyncShardedRedisBook) -> list[bool]:
        ended = []
        for n, task_id in enumerate(GROUP):
            args, kwargs = cancels(task_id, n)
            ended.append((await book.cancel(*args, **kwargs)).changed)
        return ended

    assert store.run(names["async"], end_each) == [True] * len(GROUP)
    assert store.sync(names["async"]).drain_group_notifications() == expected


@pytest.mark.parametrize("shards", [1, 2])
def test_reads_with_another_count_are_refused(store: Store, namespace: str, shards: int) -> None:
    """An async book of another count than the namespace's four (one: the default) is
    refused on every read, naming the stored count, as on its writes."""
    fill(store.sync(namespace))

    async def reads() -> list[Any]:
        async with AsyncRedisBook(store.async_client(), namespace=namespace, shards=shards) as book:
            calls = [getattr(book, name)(*args, **kwargs) for name, args, kwargs in READS]
            calls += [book.search(), book.gauges(0), book.stats(), book.group("g")]
            return [await answer_async(call) for call in calls]

    message = f"asyncbook: namespace {namespace!r} has 4 shards; open it with shards=4"
    assert set(asyncio.run(reads())) == {(AsyncBookError, "conflict", message, "shards")}
