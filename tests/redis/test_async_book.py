"""``AsyncRedisBook`` against ``RedisBook``: the same cases, the same answers and errors
(real Redis, fakeredis and a Redis Cluster), then ``wait`` and ``follow``."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, TypeVar

import fakeredis
import pytest
import redis
import redis.asyncio

from asyncbook import (
    AsyncBookError,
    AsyncRedisBook,
    CreateSpec,
    PublishInfo,
    RedisBook,
    ResumeResult,
    TaskQuery,
    UnknownTaskError,
    UnsupportedServerError,
)
from asyncbook.redis import connect, connect_async

from ..support.books import REDIS_URL, delete_namespace, redis_client

HOUR = 3_600_000
NOW = int(time.time() * 1000) - 60_000
"""A minute ago: the workers' window (by the server's clock) still holds what ran."""

_T = TypeVar("_T")


class Store:
    """One server (real Redis or fakeredis): sync books, and async books on a client of
    the running loop (an asyncio client belongs to one loop)."""

    def __init__(self, client: Any, async_client: Callable[[], Any]) -> None:
        self.client = client
        self.async_client = async_client
        self.namespaces: list[str] = []

    def sync(self, namespace: str) -> RedisBook:
        self.namespaces.append(namespace)
        return RedisBook(self.client, namespace=namespace)

    def run(self, namespace: str, use: Callable[[AsyncRedisBook], Awaitable[_T]]) -> _T:
        """``use(book)`` for an async book of ``namespace``, in a loop of its own."""

        async def scenario() -> _T:
            async with AsyncRedisBook(self.async_client(), namespace=namespace) as book:
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


def fill(book: RedisBook) -> None:
    """q (queued), r (running on w1, 40 %), s (succeeded), f (failed), group g of g1, g2."""
    info = PublishInfo(name="tasks.add", args="(1, 2)", kwargs="{}", queue="q")
    for n, task_id in enumerate(["q", "r", "s", "f"]):
        book.create(id=task_id, now_ms=NOW + n, ttl_ms=HOUR, max_attempts=1, info=info)
    for task_id in ("r", "s", "f"):
        book.apply(task_id, {"type": "start", "atMs": NOW + 10, "worker": "w1"}, f"{task_id}:s")
    book.apply("r", {"type": "progress", "atMs": NOW + 20, "progress": 40, "cursor": "c"})
    ok = {"type": "succeed", "atMs": NOW + 30, "resultRef": "ref", "resultHash": "h"}
    book.apply("s", ok, "s:e")
    failure = {"type": "fail", "atMs": NOW + 40, "error": "boom", "retryable": False}
    book.apply("f", {**failure, "exception": "ValueError", "traceback": "tb"}, "f:e")
    book.create_many(
        CreateSpec(f"g{i}", NOW + 100 + i, HOUR, 1, group_id="g", info=info) for i in (1, 2)
    )
    book.seal_group("g", 2)
    book.record_sweep(NOW + 200)


CASES: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("get", ("s",), {}),
    ("get", ("nobody",), {}),
    ("get", (7,), {}),
    ("get", ("\ud800",), {}),
    ("info", ("f",), {}),
    ("info", ("nobody",), {}),
    ("info", (None,), {}),
    ("resume", ("r", 0), {}),
    ("resume", ("r", 3), {"full_task": False}),
    ("resume", ("r", 99), {}),
    ("resume", ("r", "x"), {}),
    ("resume", ("nobody", "x"), {}),
    ("resume", ("nobody", 0), {}),
    ("list_tasks", (), {}),
    ("list_tasks", ("running",), {"full_task": False}),
    ("list_tasks", (None, 2), {}),
    ("list_tasks", (None, 2, "3"), {}),
    ("list_tasks", ("bogus",), {}),
    ("list_tasks", (None, 0), {}),
    ("list_tasks", (None, 5, "x"), {}),
    ("search", (TaskQuery(name="tasks.add"),), {}),
    ("search", (), {"state": "failed", "q": "ValueError"}),
    ("search", (), {"sort": "sideways"}),
    ("group", ("g",), {}),
    ("group", ("none",), {}),
    ("group", ("",), {}),
    ("group_members", ("g",), {}),
    ("group_members", ("g", 0), {}),
    ("overdue", (NOW + 2 * HOUR, 10), {}),
    ("overdue", (-1,), {}),
    ("overdue_count", (NOW + 2 * HOUR,), {}),
    ("overdue_count", (NOW,), {}),
    ("overdue_count", ("soon",), {}),
    ("last_sweep_ms", (), {}),
    ("check_server", (), {}),
    ("count_by_state", (), {}),
    ("transition_counts", (), {}),
    ("workers", (), {}),
    ("workers", (0,), {}),
    ("stats", ("tasks.add", HOUR, NOW + 60_000), {}),
    ("stats", ("tasks.add", 1), {}),
    ("task_names", (), {}),
    ("name_totals", (), {}),
    ("deliver_result", ("s", "k1", NOW), {}),
    ("deliver_result", ("r", "k1", NOW), {}),
    ("deliver_result", ("s", "", NOW), {}),
    ("deliver_result", ("nobody", "k2", NOW), {}),
    ("cancel", ("q", "not needed"), {"at_ms": NOW + 50}),
    ("cancel", ("s",), {"at_ms": NOW + 50}),
    ("cancel", ("nobody",), {"at_ms": NOW + 50}),
    ("cancel", ("r", 5), {"at_ms": NOW + 50}),
    ("cancel", ("r",), {"at_ms": "soon"}),
]


def answer(call: Callable[[], Any]) -> Any:
    """What a call gave: its value, or its error's type, code, message and field."""
    try:
        return call()
    except AsyncBookError as error:
        return (type(error), error.code, error.message, error.field)


@pytest.mark.parametrize(
    ("method", "args", "kwargs"), CASES, ids=[f"{i}-{c[0]}" for i, c in enumerate(CASES)]
)
def test_the_async_book_answers_as_the_sync_book(
    store: Store, namespace: str, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    # Writes change the book: each book answers on its own namespace, filled alike.
    sync_book = store.sync(namespace + "-sync")
    fill(sync_book)
    fill(store.sync(namespace + "-async"))
    expected = answer(lambda: getattr(sync_book, method)(*args, **kwargs))

    async def call(book: AsyncRedisBook) -> Any:
        return await getattr(book, method)(*args, **kwargs)

    got = answer(lambda: store.run(namespace + "-async", call))
    assert got == expected
    if method == "cancel":  # and both books read the write back alike
        read_back = store.run(namespace + "-async", lambda book: book.get(args[0]))
        assert read_back == sync_book.get(args[0])


def test_the_server_clock_is_the_same(store: Store, namespace: str) -> None:
    sync_book = store.sync(namespace)
    before = sync_book.now_ms()
    between = store.run(namespace, lambda book: book.now_ms())
    assert before <= between <= sync_book.now_ms()


def test_from_url_and_close(namespace: str) -> None:
    sync_book = RedisBook.from_url(REDIS_URL, namespace=namespace)
    fill(sync_book)

    async def read() -> Any:
        async with AsyncRedisBook.from_url(REDIS_URL, namespace=namespace) as book:
            return await book.get("s")

    try:
        assert asyncio.run(read()) == sync_book.get("s")
    finally:
        delete_namespace(sync_book.client, namespace)
        sync_book.client.close()


def test_an_unreachable_server_raises_the_sync_books_error() -> None:
    options: dict[str, Any] = {"socket_connect_timeout": 0.2, "retry": None, "namespace": "down"}
    sync_book = RedisBook.from_url("redis://127.0.0.1:1/0", **options)
    expected = answer(lambda: sync_book.get("x"))
    sync_book.client.close()
    assert expected[1] == "unavailable"

    async def read() -> Any:
        async with AsyncRedisBook.from_url("redis://127.0.0.1:1/0", **options) as book:
            return await book.get("x")

    assert answer(lambda: asyncio.run(read()))[:2] == expected[:2]


def test_a_book_never_swept_answers_none_on_both_books(store: Store, namespace: str) -> None:
    assert store.sync(namespace).last_sweep_ms() is None
    assert store.run(namespace, lambda book: book.last_sweep_ms()) is None


def test_the_async_book_checks_the_server_at_its_first_write(namespace: str) -> None:
    """An old server fails the async book's first write (nothing written), as the sync
    book's; a supported one is checked once per book."""
    sync_book = RedisBook(redis_client(), namespace=namespace)
    sync_book.create(id="q", now_ms=NOW, ttl_ms=HOUR, max_attempts=1)
    asked: list[str] = []

    def old_server(response: Any, **options: Any) -> dict[str, str]:
        asked.append("INFO")
        return {"redis_version": "6.2.14", "maxmemory_policy": "noeviction"}

    async def on_an_old_server() -> None:
        client = redis.asyncio.Redis.from_url(REDIS_URL)
        client.set_response_callback("INFO", old_server)
        async with AsyncRedisBook(client, namespace=namespace) as book:
            with pytest.raises(UnsupportedServerError, match=r"older than redis 7\.0"):
                await book.cancel("q")
            with pytest.raises(UnsupportedServerError, match=r"older than redis 7\.0"):
                await book.deliver_result("q", "k", NOW)

    async def checked_once() -> None:
        client = redis.asyncio.Redis.from_url(REDIS_URL)
        real = client.response_callbacks.get("INFO")

        def counted(response: Any, **options: Any) -> Any:
            asked.append("INFO")
            return real(response, **options) if real else response

        client.set_response_callback("INFO", counted)
        async with AsyncRedisBook(client, namespace=namespace) as book:
            await book.deliver_result("q", "k", NOW)
            await book.cancel("q", at_ms=NOW + 1)

    try:
        asyncio.run(on_an_old_server())
        assert asked == ["INFO"] * 4  # INFO server and memory, again at the next write
        task = sync_book.get("q")
        assert task is not None
        assert task.state.value == "queued"
        assert sync_book.client.get(sync_book.keys.delivery("k")) is None
        asked.clear()
        asyncio.run(checked_once())
        assert asked == ["INFO", "INFO"]
        task = sync_book.get("q")
        assert task is not None
        assert task.state.value == "cancelled"
    finally:
        delete_namespace(sync_book.client, namespace)
        sync_book.client.close()


# -- wait and follow ----------------------------------------------------------------------


def start(book: RedisBook, task_id: str) -> None:
    book.create(id=task_id, now_ms=NOW, ttl_ms=HOUR, max_attempts=1)
    book.apply(task_id, {"type": "start", "atMs": NOW + 1, "worker": "w"})


def progress(book: RedisBook, task_id: str, percent: int) -> None:
    book.apply(
        task_id, {"type": "progress", "atMs": NOW + 1 + percent, "progress": percent, "cursor": "c"}
    )


def succeed(book: RedisBook, task_id: str) -> None:
    ok = {"type": "succeed", "atMs": NOW + 500, "resultRef": "ref", "resultHash": "h"}
    book.apply(task_id, ok)


async def later(delay: float, *steps: Callable[[], Any]) -> None:
    """Run ``steps`` (sync book writes) one by one, ``delay`` seconds apart."""
    for step in steps:
        await asyncio.sleep(delay)
        await asyncio.to_thread(step)


def test_wait_returns_the_terminal_task(store: Store, namespace: str) -> None:
    sync_book = store.sync(namespace)
    start(sync_book, "t")

    async def scenario(book: AsyncRedisBook) -> Any:
        writer = asyncio.create_task(
            later(0.05, lambda: progress(sync_book, "t", 50), lambda: succeed(sync_book, "t"))
        )
        task = await book.wait("t", timeout=10)
        await writer
        return task

    task = store.run(namespace, scenario)
    assert task == sync_book.get("t")
    assert task.state.value == "succeeded"
    # An ended task is answered without waiting for a change (none will come).
    assert store.run(namespace, lambda book: book.wait("t", timeout=5)) == task


def test_wait_times_out_naming_the_task(store: Store, namespace: str) -> None:
    sync_book = store.sync(namespace)
    start(sync_book, "slow")
    began = time.monotonic()
    with pytest.raises(TimeoutError, match="'slow'"):
        store.run(namespace, lambda book: book.wait("slow", timeout=0.3))
    assert 0.25 < time.monotonic() - began < 3
    with pytest.raises(UnknownTaskError):
        store.run(namespace, lambda book: book.wait("nobody", timeout=1))
    with pytest.raises(AsyncBookError, match="timeout") as refused:
        store.run(namespace, lambda book: book.wait("slow", timeout=0))
    assert refused.value.field == "timeout"


async def collect(versions: AsyncIterator[ResumeResult]) -> list[ResumeResult]:
    return await asyncio.wait_for(_all(versions), 10)


async def _all(versions: AsyncIterator[ResumeResult]) -> list[ResumeResult]:
    return [result async for result in versions]


def test_follow_yields_every_version_after_the_cursor_then_ends(
    store: Store, namespace: str
) -> None:
    sync_book = store.sync(namespace)
    start(sync_book, "f")  # versions 0 (queued) and 1 (running)

    async def scenario(book: AsyncRedisBook) -> list[ResumeResult]:
        steps = [lambda p=p: progress(sync_book, "f", p) for p in (10, 20, 30)]
        writer = asyncio.create_task(later(0.05, *steps, lambda: succeed(sync_book, "f")))
        results = await collect(book.follow("f", 1))
        await writer
        return results

    results = store.run(namespace, scenario)
    versions = [entry.version for result in results for entry in result.events]
    assert versions == [2, 3, 4, 5]  # after the cursor, none twice, none skipped
    assert results[-1].task.state.value == "succeeded"
    assert results[-1].task.version == 5


def test_follow_of_a_caught_up_task_waits_for_its_next_version(
    store: Store, namespace: str
) -> None:
    sync_book = store.sync(namespace)
    start(sync_book, "c")

    async def scenario(book: AsyncRedisBook) -> list[ResumeResult]:
        versions = book.follow("c", 1)
        first = asyncio.create_task(anext(versions))
        await asyncio.sleep(0.2)
        assert not first.done()  # caught up: nothing until the task moves
        await asyncio.to_thread(progress, sync_book, "c", 70)
        got = [await asyncio.wait_for(first, 10)]
        await asyncio.to_thread(succeed, sync_book, "c")
        return got + await collect(versions)

    results = store.run(namespace, scenario)
    assert [[e.version for e in r.events] for r in results] == [[2], [3]]
    # At a terminal version already: ends at once, nothing yielded.
    assert store.run(namespace, lambda book: collect(book.follow("c", 3))) == []
    with pytest.raises(UnknownTaskError):
        store.run(namespace, lambda book: collect(book.follow("nobody", 0)))
    bad: Any = "x"  # refused as resume refuses it: unknown task first, then the cursor
    with pytest.raises(UnknownTaskError):
        store.run(namespace, lambda book: collect(book.follow("nobody", bad)))
    with pytest.raises(AsyncBookError) as refused:
        store.run(namespace, lambda book: collect(book.follow("c", bad)))
    assert refused.value.field == "cursorVersion"


def test_follow_resumes_after_a_lost_link_without_skipping(namespace: str) -> None:
    """The subscription is killed while the task moves; what was published meanwhile is
    read on the resubscribe, so every version arrives once."""
    sync_book = RedisBook(redis_client(), namespace=namespace)
    start(sync_book, "k")
    admin = redis.Redis.from_url(REDIS_URL)

    async def scenario() -> list[ResumeResult]:
        async with AsyncRedisBook.from_url(REDIS_URL, namespace=namespace) as async_book:
            versions = async_book.follow("k", 1)
            first = asyncio.create_task(anext(versions))
            await asyncio.sleep(0.2)  # subscribed
            await asyncio.to_thread(progress, sync_book, "k", 10)
            got = [await asyncio.wait_for(first, 10)]
            admin.client_kill_filter(_type="pubsub")
            await asyncio.to_thread(progress, sync_book, "k", 20)  # nobody listens
            await asyncio.to_thread(succeed, sync_book, "k")
            return got + await collect(versions)

    try:
        results = asyncio.run(scenario())
    finally:
        delete_namespace(sync_book.client, namespace)
        sync_book.client.close()
        admin.close()
    versions = [entry.version for result in results for entry in result.events]
    assert versions == [2, 3, 4]
    assert results[-1].task.terminal


def test_followers_close_their_subscription(namespace: str) -> None:
    async def scenario() -> None:
        async with AsyncRedisBook.from_url(REDIS_URL, namespace=namespace) as async_book:
            versions = async_book.follow("nobody-yet", 0)
            with contextlib.suppress(UnknownTaskError):
                await asyncio.wait_for(anext(versions), 10)

    asyncio.run(scenario())
    client = redis_client()
    channels = client.pubsub_channels(f"*{namespace}*")
    client.close()
    assert channels == []


def test_claim_run_holds_a_live_run_on_the_asyncio_book_too(namespace: str) -> None:
    sync_book = RedisBook.from_url(REDIS_URL, namespace=namespace)
    sync_book.create(
        id="r",
        now_ms=sync_book.now_ms(),
        ttl_ms=60_000,
        max_attempts=2,
        heartbeat_timeout_ms=60_000,
    )

    async def claims() -> Any:
        async with AsyncRedisBook.from_url(REDIS_URL, namespace=namespace) as book:
            first = await book.claim_run("r", "w1", callback_id="r:1")
            second = await book.claim_run("r", "w2")
            return getattr(first, "reason", None), type(second).__name__

    try:
        assert asyncio.run(claims()) == ("started", "Held")
        assert [entry.outcome for entry in sync_book.audit("r")] == ["held"]
    finally:
        delete_namespace(sync_book.client, namespace)
        sync_book.client.close()
