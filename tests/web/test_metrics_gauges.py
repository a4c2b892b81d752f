"""The families ``/metrics`` writes from a RedisBook's gauges (one round trip): the
notification streams' entries, each consumer group's backlog and pending entries, and
when each worker seen within the hour was last seen; on real Redis, on fakeredis through
its asyncio twin, and absent over a MemoryBook."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import httpx
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from asyncbook import AsyncBook, FailEvent, MemoryBook, RedisBook, StartEvent, SucceedEvent
from asyncbook._gauges import (
    GAUGE_WORKERS_LIMIT,
    GAUGE_WORKERS_WITHIN_MS,
    BookGauges,
    GroupBacklog,
)
from asyncbook.errors import AsyncBookError
from asyncbook.redis._gauges import gauges
from asyncbook.redis._plan import Pipeline
from asyncbook.web import BackgroundServer
from asyncbook.web._reader import close_reader, reader_for

from ..support.books import delete_namespace, fakeredis_book
from ..support.web_server import WEB_REDIS_URL, Running

pytestmark = pytest.mark.redis

HOUR = 3_600_000
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str) -> Samples:
    """Every sample of the exposition text, by (name, sorted labels)."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def run_task(book: RedisBook, task_id: str, worker: str, at_ms: int, ok: bool = True) -> None:
    book.create(id=task_id, now_ms=at_ms, ttl_ms=3 * HOUR, max_attempts=1)
    book.apply(task_id, StartEvent(at_ms=at_ms + 1, worker=worker))
    if ok:
        book.apply(task_id, SucceedEvent(at_ms=at_ms + 2, result_ref="r", result_hash="h"))
    else:
        book.apply(task_id, FailEvent(at_ms=at_ms + 2, error="boom", retryable=False))


def test_outbox_backlog_and_workers_last_seen(server: Running, client: httpx.Client) -> None:
    book = server.book
    now = book.now_ms()
    run_task(book, "a", "celery@w1", now - 5_000)
    run_task(book, "b", "celery@w2", now - 3_000, ok=False)
    run_task(book, "gone", "celery@old", now - 2 * HOUR)  # seen outside the window
    book.create(id="q", now_ms=now, ttl_ms=HOUR, max_attempts=1)
    before = samples(client.get("/metrics").text)
    assert before[("asyncbook_outbox_entries", (("stream", "tasks"),))] == 3
    assert before[("asyncbook_outbox_entries", (("stream", "groups"),))] == 0
    assert not [name for name, _ in before if name == "asyncbook_outbox_backlog"]

    read = book.consume_notifications("mailer", "c1", count=1)
    after = samples(client.get("/metrics").text)
    mailer = (("group", "mailer"), ("stream", "tasks"))
    assert after[("asyncbook_outbox_backlog", mailer)] == 3
    assert after[("asyncbook_outbox_pending", mailer)] == 1
    book.ack("mailer", read[0][0])
    acked = samples(client.get("/metrics").text)
    assert acked[("asyncbook_outbox_backlog", mailer)] == 2
    assert acked[("asyncbook_outbox_pending", mailer)] == 0

    seen = {
        dict(labels)["worker"]: value
        for (name, labels), value in acked.items()
        if name == "asyncbook_worker_last_seen_timestamp_seconds"
    }
    assert seen == {"celery@w1": (now - 4_999) / 1000, "celery@w2": (now - 2_999) / 1000}


def test_the_workers_listed_are_bounded(server: Running, client: httpx.Client) -> None:
    book = server.book
    now = book.now_ms()
    seen = {f"celery@w{n:04d}": now - n for n in range(GAUGE_WORKERS_LIMIT + 20)}
    with redis.Redis.from_url(WEB_REDIS_URL) as direct:
        direct.zadd(book.keys.workers, seen)
    text = client.get("/metrics").text
    listed = [line for line in text.splitlines() if line.startswith("asyncbook_worker_last_seen")]
    assert len(listed) == GAUGE_WORKERS_LIMIT
    assert 'worker="celery@w0000"' in listed[0]  # the most recently seen first


def awaited_gauges(book: AsyncBook, now_ms: int, within_ms: int | None = None) -> Any:
    """The gauges the server reads of ``book`` (through ``reader_for``), then closed."""

    async def read() -> Any:
        reader = reader_for(book)
        try:
            if within_ms is None:
                return await reader.gauges(now_ms)
            return await reader.gauges(now_ms, within_ms=within_ms)
        finally:
            await close_reader(reader, book)

    return asyncio.run(read())


def test_a_sync_redis_book_reads_the_same_gauges_through_its_twin(server: Running) -> None:
    book = server.book
    now = book.now_ms()
    run_task(book, "a", "celery@w1", now - 1_000)
    book.consume_notifications("mailer", "c1", count=10)

    async def both() -> tuple[BookGauges | None, BookGauges | None]:
        threaded = book.gauges(now)  # the sync book's own answer
        twin = reader_for(book)
        try:
            return threaded, await twin.gauges(now)
        finally:
            await twin.aclose()

    threaded, awaited = asyncio.run(both())
    expected = BookGauges(
        {"tasks": 1, "groups": 0},
        (GroupBacklog("tasks", "mailer", pending=1, lag=0, length=1),),
        (("celery@w1", float(now - 999)),),
    )
    assert threaded == awaited == expected


def test_fakeredis_answers_the_gauges_too() -> None:
    book = fakeredis_book(f"gauges-{uuid.uuid4().hex[:8]}")
    now = int(time.time() * 1000)
    run_task(book, "a", "w", now)
    gauges = awaited_gauges(book, now + 10)
    assert gauges is not None
    assert (gauges.stream_lengths, gauges.groups) == ({"tasks": 1, "groups": 0}, ())
    assert gauges.workers_seen == (("w", float(now + 1)),)


def test_an_unknown_lag_counts_the_whole_stream() -> None:
    group = GroupBacklog("tasks", "g", pending=2, lag=None, length=40)
    assert group.backlog == 42


def test_a_memory_book_has_no_stream_or_worker_families() -> None:
    book = MemoryBook()
    with (
        BackgroundServer(book) as server,
        httpx.Client(base_url=server.url.rstrip("/"), timeout=10) as http,
    ):
        text = http.get("/metrics").text
    assert "asyncbook_outbox" not in text
    assert "asyncbook_worker_last_seen" not in text
    assert awaited_gauges(book, 0) is None


def test_a_bad_window_is_refused() -> None:
    client = redis.Redis.from_url(WEB_REDIS_URL)
    namespace = f"gauges-{uuid.uuid4().hex[:8]}"
    book = RedisBook(client, namespace=namespace)
    try:
        with pytest.raises(AsyncBookError, match="within_ms"):
            awaited_gauges(book, 0, within_ms=0)
    finally:
        delete_namespace(client, namespace)
        client.close()


def test_the_gauges_are_one_round_trip(server: Running) -> None:
    """The plan sends one pipeline (five commands) and answers from its replies."""
    book = server.book
    plan = gauges(book.layout, book.now_ms(), GAUGE_WORKERS_WITHIN_MS)
    request = next(plan)
    assert isinstance(request, Pipeline)
    assert [command.name for command in request.commands] == [
        "xlen", "xinfo_groups", "xlen", "xinfo_groups", "zrange",
    ]  # fmt: skip
    with pytest.raises(StopIteration) as answered:
        plan.send(book.engine.execute(request))
    assert answered.value.value == BookGauges({"tasks": 0, "groups": 0}, (), ())
