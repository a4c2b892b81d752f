"""The console's reads of a RedisBook: info, search with its filters and totals, workers,
per-minute stats and per-name totals. Real Redis, fakeredis and a Redis Cluster."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import fakeredis
import pytest

from asyncbook import ApplyItem, AsyncBookError, CreateSpec, PublishInfo, RedisBook, TaskQuery
from asyncbook._console import RUNTIME_BUCKETS_MS, percentile_ms
from asyncbook.redis import connect

from ..support.books import delete_namespace, redis_client

HOUR = 3_600_000
T0 = 1_699_999_200_000  # a whole hour (in 2023), in ms
NAMES = {"gen": 6, "talk": 3}


@pytest.fixture(params=["redis", "fakeredis", "cluster"])
def book(request: pytest.FixtureRequest, namespace: str) -> Iterator[RedisBook]:
    if request.param == "redis":
        client: Any = redis_client()
    elif request.param == "cluster":
        client = connect(request.getfixturevalue("cluster_url"))
    else:
        client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    yield RedisBook(client, namespace=namespace)
    delete_namespace(client, namespace)
    client.close()


def fill(book: RedisBook) -> None:
    """gen-0..5 and talk-0..2, one per second from T0; gen-0..3 ran on w1, talk-0 on w2:
    gen-0 and gen-1 succeeded (1.5 s, 40 s), gen-2 failed, gen-3 runs, talk-0 succeeded."""
    n = 0
    for name, count in NAMES.items():
        for i in range(count):
            info = PublishInfo(name=name, args=f"({i},)", kwargs="{}", queue="q")
            book.create(
                id=f"{name}-{i}", now_ms=T0 + n * 1000, ttl_ms=HOUR, max_attempts=1, info=info
            )
            n += 1

    def run(task_id: str, worker: str, at: int, end: dict[str, Any] | None) -> None:
        book.apply(task_id, {"type": "start", "atMs": at, "worker": worker}, f"{task_id}:s")
        if end is not None:
            book.apply(task_id, end, f"{task_id}:e")

    def ok(at: int) -> dict[str, Any]:
        return {"type": "succeed", "atMs": at, "resultRef": "r", "resultHash": "h"}

    run("gen-0", "w1", T0 + 10_000, ok(T0 + 11_500))
    run("gen-1", "w1", T0 + 10_000, ok(T0 + 50_000))
    failure = {
        "type": "fail",
        "atMs": T0 + 70_000,
        "error": "ValueError: no",
        "retryable": False,
        "exception": "ValueError",
        "traceback": "Traceback (most recent call last):\nValueError: no",
    }
    run("gen-2", "w1", T0 + 60_000, failure)
    run("gen-3", "w1", T0 + 60_000, None)
    run("talk-0", "w2", T0 + 60_000, ok(T0 + 60_050))


def ids(page: Any) -> list[str]:
    return [row.task.id for row in page.tasks]


def test_info_holds_what_was_published_and_reported(book: RedisBook) -> None:
    fill(book)
    info = book.info("gen-2")
    assert info is not None
    assert (info.name, info.args_repr, info.kwargs_repr, info.queue) == ("gen", "(2,)", "{}", "q")
    assert (info.worker, info.started_at_ms, info.ended_at_ms) == ("w1", T0 + 60_000, T0 + 70_000)
    assert info.runtime_ms == 10_000
    assert info.retries == 0
    assert info.exception == "ValueError"
    assert info.traceback is not None
    assert info.traceback.endswith("ValueError: no")
    running = book.info("gen-3")
    assert running is not None
    assert running.ended_at_ms is None
    assert running.runtime_ms is None
    assert book.info("nobody") is None
    # The task itself is the seed's shape: no info in it.
    task = book.get("gen-2")
    assert task is not None
    assert "name" not in task.model_dump(by_alias=True)


def test_search_by_name_and_state_with_exact_totals(book: RedisBook) -> None:
    fill(book)
    page = book.search(TaskQuery(name="gen"))
    assert ids(page) == [f"gen-{i}" for i in (5, 4, 3, 2, 1, 0)]
    assert page.totals == {
        "queued": 2,
        "running": 1,
        "succeeded": 2,
        "failed": 1,
        "expired": 0,
        "cancelled": 0,
    }
    assert page.totals_exact
    assert page.tasks[2].info.worker == "w1"
    succeeded = book.search(name="gen", state="succeeded")
    assert ids(succeeded) == ["gen-1", "gen-0"]
    assert succeeded.totals == page.totals  # totals per state for the filter, not the state
    everything = book.search()
    assert sum(everything.totals.values()) == 9
    assert len(everything.tasks) == 9
    assert ids(book.search(state="succeeded")) == ["talk-0", "gen-1", "gen-0"]
    assert ids(book.search(name="nobody")) == []


def test_search_pages_in_both_orders(book: RedisBook) -> None:
    fill(book)
    seen: list[str] = []
    after = None
    while True:
        page = book.search(name="gen", sort="oldest", limit=4, after=after)
        seen += ids(page)
        if page.next_after is None:
            break
        after = page.next_after
    assert seen == [f"gen-{i}" for i in range(6)]
    first = book.search(limit=2)
    assert ids(first) == ["talk-2", "talk-1"]
    assert ids(book.search(limit=2, after=first.next_after)) == ["talk-0", "gen-5"]


def test_search_by_worker_id_prefix_and_time(book: RedisBook) -> None:
    fill(book)
    by_worker = book.search(worker="w1")
    assert ids(by_worker) == ["gen-3", "gen-2", "gen-1", "gen-0"]
    assert by_worker.totals["succeeded"] == 2
    assert by_worker.totals["running"] == 1
    assert ids(book.search(worker="w1", state="failed")) == ["gen-2"]
    assert ids(book.search(worker="w2", name="gen")) == []
    assert ids(book.search(q="talk-")) == ["talk-2", "talk-1", "talk-0"]
    assert book.search(q="talk-").totals["succeeded"] == 1
    assert ids(book.search(q="gen-1")) == ["gen-1"]
    # Created one per second from T0: gen-0..5 at +0..5 s, talk-0..2 at +6..8 s.
    assert ids(book.search(since_ms=T0 + 6000)) == ["talk-2", "talk-1", "talk-0"]
    assert ids(book.search(until_ms=T0 + 1000, sort="oldest")) == ["gen-0", "gen-1"]
    window = book.search(name="gen", since_ms=T0 + 2000, until_ms=T0 + 3000)
    assert ids(window) == ["gen-3", "gen-2"]
    assert window.totals["running"] == 1
    assert window.totals["failed"] == 1


@pytest.mark.parametrize(
    ("filters", "field"),
    [
        ({"state": "lost"}, "state"),
        ({"name": ""}, "name"),
        ({"worker": "x" * 201}, "worker"),
        ({"since_ms": -1}, "since_ms"),
        ({"until_ms": 1.5}, "until_ms"),
        ({"sort": "random"}, "sort"),
        ({"limit": 0}, "limit"),
        ({"limit": 1001}, "limit"),
        ({"after": "x"}, "after"),
        ({"after": "١٢"}, "after"),  # digits, but not ASCII ones
    ],
)
def test_bad_search_input_names_its_field(
    book: RedisBook, filters: dict[str, Any], field: str
) -> None:
    with pytest.raises(AsyncBookError) as raised:
        book.search(**filters)
    assert raised.value.field == field


def test_workers_list_their_counts_and_running_tasks(book: RedisBook) -> None:
    fill(book)
    workers = {worker.name: worker for worker in book.workers(within_ms=10 * 365 * 86_400_000)}
    assert set(workers) == {"w1", "w2"}
    w1 = workers["w1"]
    assert (w1.started, w1.succeeded, w1.failed, w1.running) == (4, 2, 1, ("gen-3",))
    assert w1.last_seen_ms == T0 + 60_000  # its latest start
    assert (workers["w2"].succeeded, workers["w2"].running) == (1, ())
    assert book.workers(within_ms=1) == []  # nobody seen in the last millisecond


def test_stats_count_each_minute_and_bucket_runtimes(book: RedisBook) -> None:
    fill(book)
    stats = book.stats("gen", window_ms=HOUR, now_ms=T0 + 30 * 60_000)
    assert len(stats.minutes) == 60
    assert stats.totals == {"started": 4, "succeeded": 2, "failed": 1, "expired": 0, "cancelled": 0}
    by_minute = {m.minute_ms: m for m in stats.minutes if m.started or m.succeeded or m.failed}
    assert by_minute[T0].started == 2
    assert by_minute[T0].succeeded == 2
    assert by_minute[T0 + 60_000].failed == 1
    assert by_minute[T0 + 60_000].started == 2
    # Runtimes 1.5 s, 40 s and 10 s: one each in the 2.5 s, 60 s and 10 s buckets.
    counted = [i for i, count in enumerate(stats.runtime_buckets) if count]
    assert [RUNTIME_BUCKETS_MS[i] for i in counted] == [2_500, 10_000, 60_000]
    assert stats.p50_ms == percentile_ms(stats.runtime_buckets, 0.5)
    assert stats.failure_rate == pytest.approx(1 / 3)
    everyone = book.stats(None, window_ms=HOUR, now_ms=T0 + 30 * 60_000)
    assert everyone.totals["succeeded"] == 3
    assert everyone.totals["started"] == 5
    day = book.stats("gen", window_ms=24 * HOUR, now_ms=T0 + 30 * 60_000)
    assert len(day.minutes) == 1440
    assert day.totals == stats.totals
    with pytest.raises(AsyncBookError) as raised:
        book.stats("gen", window_ms=1000)
    assert raised.value.field == "window_ms"


def test_name_totals_and_names(book: RedisBook) -> None:
    fill(book)
    assert book.task_names() == ["gen", "talk"]
    totals = {entry.name: entry for entry in book.name_totals()}
    gen = totals["gen"]
    assert (gen.started, gen.succeeded, gen.failed) == (4, 2, 1)
    assert sum(gen.runtime_buckets) == 3
    assert gen.runtime_sum_ms == 1_500 + 40_000 + 10_000
    assert totals["talk"].succeeded == 1


def test_every_console_key_shares_the_books_slot(book: RedisBook) -> None:
    fill(book)
    book.catch_up_index()  # the name indexes are the indexer's
    client: Any = book.engine.slot_client()
    keys = [key.decode() for key in client.scan_iter(match="*", count=1000)]
    mine = [key for key in keys if key.startswith(book.keys.tag)]
    assert any(":n:" in key for key in mine)
    assert any(":sa:" in key for key in mine)
    assert not [key for key in keys if book.namespace in key and key not in mine]


def test_percentiles_interpolate_inside_a_bucket() -> None:
    buckets = [0] * (len(RUNTIME_BUCKETS_MS) + 1)
    assert percentile_ms(buckets, 0.5) is None
    buckets[3] = 4  # four runs in (500, 1000]
    assert percentile_ms(buckets, 0.5) == 750
    buckets[-1] = 4
    assert percentile_ms(buckets, 0.99) == RUNTIME_BUCKETS_MS[-1]


def test_stats_over_a_day_is_one_round_trip(
    book: RedisBook, monkeypatch: pytest.MonkeyPatch
) -> None:
    fill(book)
    book.stats("gen")  # the first call also loads the script (NOSCRIPT, then EVAL)
    client: Any = book.client
    calls: list[Any] = []
    sent = client.execute_command

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[0])
        return sent(*args, **kwargs)

    monkeypatch.setattr(client, "execute_command", counting)
    stats = book.stats("gen", window_ms=24 * HOUR)  # now: the server's clock
    # One script call, after the catch-up's read of the change stream (nothing waiting).
    assert [call for call in calls if str(call).upper() != "XRANGE"] in (["EVALSHA"], ["FCALL_RO"])
    assert stats.window_ms == 24 * HOUR
    assert len(stats.minutes) == 1440


def test_prune_forgets_workers_unseen_for_a_week(book: RedisBook) -> None:
    fill(book)  # its workers were last seen in 2023
    now = book.now_ms()
    book.create(id="fresh", now_ms=now, ttl_ms=HOUR, max_attempts=1, info=PublishInfo(name="gen"))
    book.apply("fresh", {"type": "start", "atMs": now, "worker": "w3"}, "fresh:s")
    assert {w.name for w in book.workers(within_ms=20 * 365 * 86_400_000)} == {"w1", "w2", "w3"}
    book.prune()
    assert {w.name for w in book.workers(within_ms=20 * 365 * 86_400_000)} == {"w3"}


@pytest.mark.long
def test_a_workers_index_keeps_its_latest_thousand_tasks(book: RedisBook) -> None:
    # The index is trimmed to 1,000 every 64th start of the worker: here the 1,024th.
    specs = [
        CreateSpec(id=f"job-{n:04}", now_ms=T0 + n, ttl_ms=HOUR, max_attempts=1)
        for n in range(1_024)
    ]
    book.create_many(specs)
    starts: list[ApplyItem] = [
        (spec.id, {"type": "start", "atMs": T0 + 2_000, "worker": "w9"}, None) for spec in specs
    ]
    book.apply_many(starts)
    page = book.search(worker="w9", sort="oldest", limit=10)
    assert page.tasks[0].task.id == "job-0024"  # the 24 oldest left the index
    assert page.totals["running"] == 1_000
    assert page.totals_exact
    assert book.workers(within_ms=20 * 365 * 86_400_000)[0].started == 1_024


def test_a_companion_hash_ends_with_its_task(book: RedisBook) -> None:
    """Args or a traceback go to a companion hash: it expires with the task's record."""
    now = book.now_ms()
    book.create(id="bare", now_ms=now, ttl_ms=HOUR, max_attempts=1, info=PublishInfo(name="g"))
    client: Any = book.engine.slot_client()
    assert not client.exists(book.keys.info("bare"))  # args off: no companion at all
    book.apply("bare", {"type": "start", "atMs": now, "worker": "w"}, "bare:s")
    failure = {"type": "fail", "atMs": now + 1, "error": "e", "retryable": False}
    book.apply("bare", {**failure, "traceback": "Traceback ..."}, "bare:f")
    companion, task = client.pttl(book.keys.info("bare")), client.pttl(book.keys.task("bare"))
    assert companion > 0
    assert abs(companion - task) < 1_000  # the same retention, read a moment apart
