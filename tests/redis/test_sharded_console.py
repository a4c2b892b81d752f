"""The console's reads of a sharded book answer as one shard's: the same tasks written
to a one-shard book and to a four-shard book, then every search (each sort, both
directions, filters, q) followed page by page to the end, workers, stats, names, name
totals, gauges and the audit trail compared. Real Redis, fakeredis and a Redis Cluster
(the shards on its three masters)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from typing import Any

import fakeredis
import pytest

from asyncbook import PublishInfo, RedisBook, TaskQuery
from asyncbook._console import SORT_FIELDS, SearchPage
from asyncbook.redis import ShardedRedisBook, connect
from asyncbook.redis import _console as console

from ..support.books import delete_namespace, redis_client

HOUR = 3_600_000
T0 = 1_699_999_200_000  # a whole hour (in 2023), in ms
COUNT = 72
NAMES = ("alpha", "beta", "gamma", None)
ALL_TIME = 100 * 365 * 86_400_000


def _create(book: RedisBook, i: int) -> str:
    task_id = f"t{i:03d}"
    name = NAMES[i % len(NAMES)]
    info = None if name is None else PublishInfo(name=name, args=f"({i},)", kwargs="{}")
    attempts = 2 if i % 7 == 0 else 1
    book.create(id=task_id, now_ms=T0 + i * 1000, ttl_ms=HOUR, max_attempts=attempts, info=info)
    return task_id


def _run(book: RedisBook, i: int) -> None:
    """Task i's life: six kinds by i % 6; starts and ends at a few shared times (ties
    in every sort), on three workers."""
    task_id = f"t{i:03d}"
    worker = f"w{i % 3}"
    start = T0 + 200_000 + (i % 4) * 1000
    kind = i % 6

    def event(kind: str, at: int, **more: Any) -> dict[str, Any]:
        return {"type": kind, "atMs": at, **more}

    def apply(body: dict[str, Any], step: str) -> None:
        book.apply(task_id, body, f"{task_id}:{step}")

    if kind == 0:
        return  # queued
    apply(event("start", start, worker=worker), "s")
    if i % 7 == 0 and kind == 2:  # a retry: two attempts
        apply(event("fail", start + 10, error="flaky", retryable=True), "f")
        apply(event("start", start + 20, worker=worker), "s2")
    if kind == 1:
        return  # running
    if kind == 2:
        runtime = (i % 5) * 250
        apply(event("succeed", start + 20 + runtime, resultRef="r", resultHash="h"), "e")
    elif kind == 3:
        text = f"boom {i}" if i % 2 else "ValueError: no"
        apply(event("fail", start + 500, error=text, retryable=False, exception="E"), "e")
    elif kind == 4:
        book.cancel(task_id, "enough", at_ms=start + 700)
    else:
        book.expire(task_id)


def fill(books: list[RedisBook]) -> None:
    for i in range(COUNT):
        for book in books:
            _create(book, i)
    for i in range(COUNT):
        for book in books:
            _run(book, i)


@pytest.fixture(params=["redis", "fakeredis", "cluster"])
def books(request: pytest.FixtureRequest, namespace: str) -> Iterator[tuple[RedisBook, RedisBook]]:
    """A one-shard book and a four-shard book (two namespaces), with the same tasks."""
    if request.param == "redis":
        client: Any = redis_client()
    elif request.param == "cluster":
        client = connect(request.getfixturevalue("cluster_url"))
    else:
        client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    one = RedisBook(client, namespace=namespace)
    four = RedisBook(client, namespace=namespace + "-s4", shards=4)
    assert isinstance(four, ShardedRedisBook)
    fill([one, four])
    yield one, four
    delete_namespace(client, namespace)
    delete_namespace(client, namespace + "-s4")
    client.close()


def _follow(book: RedisBook, query: TaskQuery) -> tuple[list[str], list[SearchPage]]:
    """Every page of ``query`` to the end: the ids in order, and the pages."""
    seen: list[str] = []
    pages: list[SearchPage] = []
    after = None
    for _ in range(COUNT + 2):
        page = book.search(query._replace(after=after))
        pages.append(page)
        seen += [row.task.id for row in page.tasks]
        if page.next_after is None:
            return seen, pages
        after = page.next_after
    raise AssertionError("the pages never ended")


def _same_pages(one: RedisBook, four: RedisBook, query: TaskQuery) -> None:
    ids_one, pages_one = _follow(one, query)
    ids_four, pages_four = _follow(four, query)
    assert ids_four == ids_one, query
    assert len(set(ids_four)) == len(ids_four)
    assert [len(page.tasks) for page in pages_four] == [len(page.tasks) for page in pages_one]
    for page_one, page_four in zip(pages_one, pages_four, strict=True):
        assert page_four.totals == page_one.totals, query
        assert page_four.totals_exact == page_one.totals_exact
        assert page_four.matched == page_one.matched
        assert page_four.scan_complete
        rows = zip(page_one.tasks, page_four.tasks, strict=True)
        assert all(a.model_dump() == b.model_dump() for a, b in rows)


SORTS = [f"{sign}{field}" for field in SORT_FIELDS for sign in ("", "-")]
FILTERS: list[dict[str, Any]] = [
    {},
    {"state": "succeeded"},
    {"state": "queued"},  # no runtime, start or end: all of them last, by creation
    {"name": "beta"},
    {"worker": "w1"},
    {"q": "t01"},  # an id prefix
    {"q": "amm"},  # a name (gamma)
    {"q": "BOOM"},  # the error's text
    {"since_ms": T0 + 20_000, "until_ms": T0 + 50_000},
]


@pytest.mark.parametrize("books", ["redis"], indirect=True)
@pytest.mark.parametrize("sort", SORTS)
def test_search_pages_merge_as_one_shard_in_every_sort(
    books: tuple[RedisBook, RedisBook], sort: str
) -> None:
    one, four = books
    for filters in FILTERS:
        _same_pages(one, four, TaskQuery(sort=sort, limit=9, **filters))


@pytest.mark.parametrize("books", ["fakeredis", "cluster"], indirect=True)
def test_search_pages_merge_on_fakeredis_and_a_cluster(books: tuple[RedisBook, RedisBook]) -> None:
    one, four = books
    assert isinstance(four, ShardedRedisBook)
    if not isinstance(four.client, fakeredis.FakeRedis):
        assert len(four.shard_map()) > 1  # the shards on several masters
    for sort, filters in itertools.product(("-runtime", "name"), FILTERS[:4]):
        _same_pages(one, four, TaskQuery(sort=sort, limit=9, **filters))


@pytest.mark.parametrize("books", ["redis"], indirect=True)
def test_a_page_in_creation_order_reads_each_shard_once_past_its_share(
    books: tuple[RedisBook, RedisBook], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page in creation order learns from the shards' first index entries how many of
    its rows each shard holds: each shard's page is one row past its share (every row
    read once, in one script call per shard, its keys given at once)."""
    one, four = books
    assert isinstance(four, ShardedRedisBook)
    asked: list[int] = []
    original = console.search_page_at

    def counted(book: Any, query: TaskQuery, unnamed: bool, ids_ahead: Any = ()) -> Any:
        asked.append(query.limit)
        found = yield from original(book, query, unnamed, ids_ahead)
        return found

    monkeypatch.setattr(console, "search_page_at", counted)
    filtered: list[dict[str, Any]] = [{}, {"state": "succeeded"}, {"name": "beta"}]
    for filters in filtered:
        expected = [row.task.id for row in one.search(TaskQuery(limit=20, **filters)).tasks]
        asked.clear()
        page = four.search(TaskQuery(limit=20, **filters))
        assert [row.task.id for row in page.tasks] == expected
        assert len(asked) == 4  # no shard read again
        assert sum(asked) <= 20 + 1 + 4


@pytest.mark.parametrize("books", ["redis"], indirect=True)
def test_a_page_skipping_records_gone_or_one_shard_holding_the_newest_is_exact(
    books: tuple[RedisBook, RedisBook],
) -> None:
    """Where the shards' first entries mislead (records gone that their indexes still
    list; every newest task in one shard) the shards read again keep the pages exact."""
    one, four = books
    assert isinstance(four, ShardedRedisBook)
    gone = [f"t{i:03d}" for i in range(COUNT - 1, COUNT - 14, -2)]
    for task_id in gone:  # the record expired; prune has not dropped its entries yet
        one.client.delete(one.keys.task(task_id))
        four.client.delete(four.shard_of(task_id).keys.task(task_id))
    states: list[dict[str, Any]] = [{}, {"state": "queued"}]
    for filters in states:
        _same_pages(one, four, TaskQuery(limit=7, **filters))
        _same_pages(one, four, TaskQuery(sort="created", limit=7, **filters))
    home = four.shard_of("t000")
    late = [f"late-{n}" for n in range(400) if four.shard_of(f"late-{n}") is home][:12]
    for task_id in late:
        for book in (one, four):
            book.create(id=task_id, now_ms=T0 + HOUR, ttl_ms=HOUR, max_attempts=1)
    _same_pages(one, four, TaskQuery(limit=5))
    assert [row.task.id for row in four.search(TaskQuery(limit=5)).tasks] == late[::-1][:5]


def test_a_scan_that_runs_out_of_budget_continues_without_skipping(
    books: tuple[RedisBook, RedisBook], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a budget of a few entries per page every shard's walk stops early: the
    merged page ends where the first shard stopped, and its cursor resumes there."""
    one, four = books
    whole = {
        sort: _follow(one, TaskQuery(sort=sort, q="t06", limit=3))[0]
        for sort in ("-created", "runtime", "-started", "name")
    }
    monkeypatch.setattr(console, "SEARCH_SCAN_LIMIT", 16)
    for sort, expected in whole.items():
        found, pages = _follow(four, TaskQuery(sort=sort, q="t06", limit=3))
        assert found == expected, sort
        assert not all(page.scan_complete for page in pages)


def test_cursor_of_a_shard_is_never_a_rounded_number(books: tuple[RedisBook, RedisBook]) -> None:
    """The creation order of a sharded book is ~1.8e15: the cursor holds it whole."""
    _one, four = books
    page = four.search(limit=3)
    assert page.next_after is not None
    assert page.next_after.isdigit()
    assert len(page.next_after) >= 15


def test_workers_names_totals_and_stats_are_summed(books: tuple[RedisBook, RedisBook]) -> None:
    one, four = books
    assert [w.model_dump() for w in four.workers(ALL_TIME)] == [
        w.model_dump() for w in one.workers(ALL_TIME)
    ]
    assert four.task_names() == one.task_names() == ["alpha", "beta", "gamma"]
    assert [t.model_dump() for t in four.name_totals()] == [
        t.model_dump() for t in one.name_totals()
    ]
    for name in (None, "alpha", "gamma"):
        now = T0 + 30 * 60_000
        assert four.stats(name, HOUR, now).model_dump() == one.stats(name, HOUR, now).model_dump()
    # Without a clock given: the server's, read once for every shard.
    assert four.stats().totals == one.stats().totals
    assert four.count_by_state() == one.count_by_state()


def test_gauges_are_summed(books: tuple[RedisBook, RedisBook]) -> None:
    one, four = books
    for book in (one, four):
        book.consume_notifications("readers", "c1", count=5)
    now = one.now_ms()
    gauges_one, gauges_four = one.gauges(now, ALL_TIME), four.gauges(now, ALL_TIME)
    assert gauges_four.stream_lengths == gauges_one.stream_lengths
    assert gauges_four.workers_seen == gauges_one.workers_seen
    [group_one] = gauges_one.groups
    [group_four] = gauges_four.groups
    assert (group_four.stream, group_four.group) == (group_one.stream, group_one.group)
    assert (group_four.pending, group_four.length) == (group_one.pending, group_one.length)
    assert (group_four.lag, group_four.backlog) == (group_one.lag, group_one.backlog)


def test_info_and_the_audit_trail_route_and_merge(books: tuple[RedisBook, RedisBook]) -> None:
    one, four = books
    for i in range(COUNT):
        task_id = f"t{i:03d}"
        info_one, info_four = one.info(task_id), four.info(task_id)
        assert info_one is not None
        assert info_four is not None
        assert info_four.model_dump() == info_one.model_dump()
    assert four.info("nobody") is None
    for i in itertools.islice(range(0, COUNT, 6), 8):  # queued tasks: cancelled, audited
        for book in (one, four):
            book.cancel(f"t{i:03d}", f"by hand {i}", actor="ops")
            book.record_audit(f"t{i:03d}", "retry", "ops", "again", "not-retryable")
        time.sleep(0.002)  # the log orders by the server's clock: one ms apart

    def entries(book: RedisBook, **given: Any) -> list[tuple[Any, ...]]:
        return [(e.actor, e.action, e.task_id, e.reason, e.outcome) for e in book.audit(**given)]

    assert entries(four) == entries(one)
    assert len(entries(four)) == 16
    assert entries(four, limit=5) == entries(one, limit=5)
    assert entries(four, task_id="t006") == entries(one, task_id="t006")
    newest = four.audit(limit=16)
    assert [e.at_ms for e in newest] == sorted((e.at_ms for e in newest), reverse=True)
