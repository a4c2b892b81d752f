"""The operator console's API over HTTP (search, task info, workers, stats, names, per-name
metrics), on RedisBook with real Redis; and its absence over a book without task info."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.responses import JSONResponse

from asyncbook import FailEvent, MemoryBook, RedisBook, StartEvent, SucceedEvent
from asyncbook._console import RUNTIME_BUCKETS_MS, PublishInfo
from asyncbook._models import STATE_NAMES, to_wire
from asyncbook._times import parse_duration, parse_moment
from asyncbook.errors import AsyncBookError
from asyncbook.redis import _indexer as indexer
from asyncbook.web import BackgroundServer
from asyncbook.web._paths import task_path

from ..support.web_server import Running, running_server

pytestmark = pytest.mark.redis

MINUTE = 60_000
HOUR = 60 * MINUTE
TOKEN = "s3cret-s3cret-s3cret"
LONG = "x" * 201


def now_ms() -> int:
    return int(time.time() * 1000)


def add(
    book: RedisBook,
    task_id: str,
    created_ms: int,
    name: str | None,
    worker: str | None = None,
    end: str | None = None,
    runtime_ms: int = 200,
) -> None:
    """A task published at ``created_ms``; started by ``worker``; ended as ``end``."""
    info = None if name is None else PublishInfo(name=name, args="(1, 2)", queue="celery")
    book.create(id=task_id, now_ms=created_ms, ttl_ms=48 * HOUR, max_attempts=1, info=info)
    if worker is None:
        return
    started = created_ms + 10
    book.apply(task_id, StartEvent(at_ms=started, worker=worker))
    if end == "succeeded":
        book.apply(
            task_id, SucceedEvent(at_ms=started + runtime_ms, result_ref="r", result_hash="h")
        )
    elif end == "failed":
        book.apply(task_id, FailEvent(at_ms=started + runtime_ms, error="boom", retryable=False))


# id -> (state, name, worker, minutes ago it was created); newest first.
TASKS = {
    "add-3": ("queued", "app.add", None, 1),
    "plain": ("queued", None, None, 5),
    "mul-2": ("succeeded", "app.mul", "w1", 10),
    "add-2": ("failed", "app.add", "w2", 30),
    "mul-1": ("running", "app.mul", "w1", 120),
    "add-1": ("succeeded", "app.add", "w1", 180),
}


@pytest.fixture
def tasks(server: Running) -> int:
    """The ``TASKS`` in the server's book; returns the ``now`` they were created from."""
    now = now_ms()
    for task_id, (state, name, worker, ago) in reversed(TASKS.items()):
        end = state if state in ("succeeded", "failed") else None
        add(server.book, task_id, now - ago * MINUTE, name, worker, end)
    return now


def matching(params: dict[str, str], now: int) -> list[str]:
    """The ``TASKS`` that a search's filters other than ``state`` match (its totals)."""
    since = parse_moment(params.get("since") or "0", "since", now)
    until = parse_moment(params.get("until") or str(now), "until", now)
    found = []
    for task_id, (_, name, worker, ago) in TASKS.items():
        if params.get("name") and name != params["name"]:
            continue
        if params.get("worker") and worker != params["worker"]:
            continue
        if not task_id.startswith(params.get("q", "")):
            continue
        if since <= now - ago * MINUTE <= until:
            found.append(task_id)
    return found


def totals(ids: list[str]) -> dict[str, int]:
    counts = {state: 0 for state in STATE_NAMES}
    for task_id in ids:
        counts[TASKS[task_id][0]] += 1
    return counts


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat()


def assert_refused(response: httpx.Response, field: str) -> None:
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["code"] == "invalid-request"
    assert body["field"] == field
    assert body["message"]


# -- search ----------------------------------------------------------------------------------


NEWEST_FIRST = list(TASKS)


@pytest.mark.parametrize(
    ("params", "ids"),
    [
        ({}, NEWEST_FIRST),
        ({"name": "", "state": "", "worker": "", "q": "", "since": "", "sort": ""}, NEWEST_FIRST),
        ({"sort": "oldest"}, NEWEST_FIRST[::-1]),
        ({"name": "app.add"}, ["add-3", "add-2", "add-1"]),
        ({"name": "app.add", "sort": "oldest"}, ["add-1", "add-2", "add-3"]),
        ({"name": "no.such.task"}, []),
        ({"state": "succeeded"}, ["mul-2", "add-1"]),
        ({"state": "queued"}, ["add-3", "plain"]),
        ({"name": "app.mul", "state": "running"}, ["mul-1"]),
        ({"worker": "w1", "state": "succeeded"}, ["mul-2", "add-1"]),
        ({"worker": "w1"}, ["mul-2", "mul-1", "add-1"]),
        ({"worker": "w2"}, ["add-2"]),
        ({"worker": "w1", "name": "app.add"}, ["add-1"]),
        ({"q": "mul"}, ["mul-2", "mul-1"]),
        ({"q": "add-"}, ["add-3", "add-2", "add-1"]),
        ({"q": "pl", "state": "queued"}, ["plain"]),  # "p": app.add's tasks too (its name)
        ({"since": "1d", "state": "failed"}, ["add-2"]),
        ({"since": "15m"}, ["add-3", "plain", "mul-2"]),
        ({"until": "15m"}, ["add-2", "mul-1", "add-1"]),
        ({"since": "150m", "until": "20m"}, ["add-2", "mul-1"]),
        ({"since": "1h", "until": "2h"}, []),  # until before since: an empty range
        ({"since": "1d", "sort": "oldest", "name": "app.mul"}, ["mul-1", "mul-2"]),
    ],
)
def test_search_filters_sort_and_totals(
    client: httpx.Client, tasks: int, params: dict[str, str], ids: list[str]
) -> None:
    body = client.get("/api/search", params=params).json()
    assert [row["task"]["id"] for row in body["tasks"]] == ids
    # The totals count every state (the chips to pick one): the filter but for its state.
    assert body["totals"] == totals(matching(params, tasks))
    assert isinstance(body["totalsExact"], bool)
    assert "nextAfter" not in body
    for row in body["tasks"]:
        assert "history" not in row["task"]
        assert row["info"]["id"] == row["task"]["id"]
        assert row["task"]["state"] == TASKS[row["task"]["id"]][0]
        assert row["info"].get("name") == TASKS[row["task"]["id"]][1]


@pytest.mark.parametrize("q", ["add.", "%", "add%-", "[a", "*", "add-?", "^add", "add-3\n"])
def test_search_id_prefix_is_literal(client: httpx.Client, tasks: int, q: str) -> None:
    body = client.get("/api/search", params={"q": q}).json()
    assert body["tasks"] == []
    assert sum(body["totals"].values()) == 0


def test_search_times_in_ms_and_iso(client: httpx.Client, tasks: int) -> None:
    since, until = tasks - 150 * MINUTE, tasks - 20 * MINUTE
    for lower, upper in ((str(since), str(until)), (iso(since), iso(until))):
        body = client.get("/api/search", params={"since": lower, "until": upper}).json()
        assert [row["task"]["id"] for row in body["tasks"]] == ["add-2", "mul-1"]
    exact = tasks - 30 * MINUTE  # add-2's creation: both bounds include it
    body = client.get("/api/search", params={"since": str(exact), "until": str(exact)}).json()
    assert [row["task"]["id"] for row in body["tasks"]] == ["add-2"]


def test_search_rows_carry_the_info(client: httpx.Client, tasks: int) -> None:
    body = client.get("/api/search", params={"q": "add-2"}).json()
    [row] = body["tasks"]
    assert row["info"]["name"] == "app.add"
    assert row["info"]["queue"] == "celery"
    assert row["info"]["worker"] == "w2"
    assert row["info"]["createdAtMs"] == tasks - 30 * MINUTE
    assert row["info"]["runtimeMs"] == 200


@pytest.mark.parametrize("sort", ["newest", "oldest"])
@pytest.mark.parametrize("filters", [{}, {"name": "app.add"}, {"worker": "w1"}])
def test_search_pages_with_after(
    client: httpx.Client, tasks: int, sort: str, filters: dict[str, str]
) -> None:
    whole = client.get("/api/search", params={"sort": sort, **filters}).json()
    seen: list[str] = []
    after: str | None = None
    for _ in range(10):
        params = {"sort": sort, "limit": "2", **filters} | ({"after": after} if after else {})
        page = client.get("/api/search", params=params).json()
        assert len(page["tasks"]) <= 2
        assert page["totals"] == whole["totals"]
        seen += [row["task"]["id"] for row in page["tasks"]]
        after = page.get("nextAfter")
        if after is None:
            break
    assert seen == [row["task"]["id"] for row in whole["tasks"]]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"name": LONG}, "name"),
        ({"state": "done"}, "state"),
        ({"worker": LONG}, "worker"),
        ({"q": LONG}, "q"),
        ({"since": "yesterday"}, "since"),
        ({"since": "-5"}, "since"),
        ({"since": "10x"}, "since"),
        ({"since": "1.5"}, "since"),
        ({"since": "9" * 20}, "since"),
        ({"since": "1969-12-31T00:00:00Z"}, "since"),
        ({"since": "2024-13-01"}, "since"),
        ({"since": "1" * 300}, "since"),
        ({"until": "soon"}, "until"),
        ({"until": "2024-01-01T25:00"}, "until"),
        ({"sort": "up"}, "sort"),
        ({"limit": "0"}, "limit"),
        ({"limit": "1001"}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"limit": "-1"}, "limit"),
        ({"after": "not-a-cursor"}, "after"),
        ({"after": "١٢"}, "after"),
        ({"after": "9" * 300}, "after"),
        ({"after": "-1"}, "after"),
    ],
)
def test_search_refuses_bad_parameters(
    client: httpx.Client, params: dict[str, str], field: str
) -> None:
    assert_refused(client.get("/api/search", params=params), field)


def test_the_listing_takes_the_filters_and_adds_info_and_totals(
    server: Running, client: httpx.Client, tasks: int
) -> None:
    """``/api/tasks`` keeps its shape (tasks without history, ``nextAfter``) and takes the
    search's filters; each task gains an ``info`` key, the answer ``totals``."""
    body = client.get("/api/tasks", params={"limit": "2", "name": "app.add"}).json()
    assert set(body) == {
        "tasks", "nextAfter", "totals", "totalsExact", "scanned", "scanComplete", "indexLag",
    }  # fmt: skip
    assert body["indexLag"] == {"entries": 0}  # caught up
    search = client.get("/api/search", params={"limit": "2", "name": "app.add"}).json()
    assert body["totals"] == search["totals"]
    assert body["nextAfter"] == search["nextAfter"]
    for task, row in zip(body["tasks"], search["tasks"], strict=True):
        assert "history" not in task
        assert task["info"] == row["info"]
        assert {key: value for key, value in task.items() if key != "info"} == row["task"]
    plain = client.get("/api/tasks", params={"limit": "2"}).json()
    assert [task["id"] for task in plain["tasks"]] == [
        task.id for task in server.book.list_tasks(limit=2).tasks
    ]


# -- one task ----------------------------------------------------------------------------------


def test_task_answer_gains_info_and_keeps_its_bytes(
    server: Running, client: httpx.Client, tasks: int
) -> None:
    for task_id in TASKS:
        response = client.get(task_path(task_id))
        assert response.status_code == 200
        task = server.book.get(task_id)
        assert task is not None
        before = bytes(JSONResponse(to_wire(task)).body)
        assert response.content.startswith(before[:-1] + b',"info":{')
        info = response.json()["info"]
        assert info["id"] == task_id
        assert info.get("name") == TASKS[task_id][1]
        assert info.get("worker") == TASKS[task_id][2]
        assert info.get("args") == (None if TASKS[task_id][1] is None else "(1, 2)")
    failed = client.get(task_path("add-2")).json()
    assert failed["info"]["endedAtMs"] == failed["info"]["startedAtMs"] + 200
    assert [entry["version"] for entry in failed["history"]] == [1, 2]


def test_unknown_task_is_still_404(client: httpx.Client) -> None:
    response = client.get(task_path("nope"))
    assert response.status_code == 404
    assert response.json()["field"] == "taskId"


# -- workers, stats, names -----------------------------------------------------------------------


def test_workers(client: httpx.Client, tasks: int) -> None:
    body = client.get("/api/workers").json()
    workers = {worker["name"]: worker for worker in body["workers"]}
    assert set(workers) == {"w1", "w2"}
    assert [worker["name"] for worker in body["workers"]] == ["w1", "w2"]  # last seen first
    assert workers["w1"]["running"] == ["mul-1"]
    assert workers["w1"]["succeeded"] == 2
    assert workers["w1"]["failed"] == 0
    assert workers["w1"]["started"] == 3
    assert workers["w2"]["failed"] == 1
    assert workers["w2"]["running"] == []
    assert workers["w1"]["lastSeenMs"] >= workers["w2"]["lastSeenMs"]
    recent = client.get("/api/workers", params={"within": "20m"}).json()
    assert [worker["name"] for worker in recent["workers"]] == ["w1"]
    assert client.get("/api/workers", params={"within": "7d"}).json() == body


def test_stats(client: httpx.Client, tasks: int) -> None:
    add_stats = client.get("/api/stats", params={"name": "app.add", "window": "1h"}).json()
    assert add_stats["name"] == "app.add"
    assert add_stats["windowMs"] == HOUR
    assert len(add_stats["minutes"]) == 60
    assert add_stats["totals"]["failed"] == 1  # add-2 ended 30 minutes ago; add-1 long before
    assert add_stats["totals"]["succeeded"] == 0
    assert add_stats["runtimeBucketsMs"] == list(RUNTIME_BUCKETS_MS)
    every = client.get("/api/stats", params={"window": "4h"}).json()
    assert "name" not in every
    assert len(every["minutes"]) == 240
    assert every["totals"]["succeeded"] == 2
    assert every["totals"]["failed"] == 1
    minutes = [minute["minuteMs"] for minute in every["minutes"]]
    assert minutes == sorted(minutes)
    default = client.get("/api/stats").json()
    assert default["windowMs"] == HOUR
    assert len(client.get("/api/stats", params={"window": "24h"}).json()["minutes"]) == 1440


@pytest.mark.parametrize(
    ("path", "params", "field"),
    [
        ("/api/stats", {"window": "30s"}, "window"),
        ("/api/stats", {"window": "25h"}, "window"),
        ("/api/stats", {"window": "0"}, "window"),
        ("/api/stats", {"window": "1y"}, "window"),
        ("/api/stats", {"window": "9" * 40}, "window"),
        ("/api/stats", {"name": LONG}, "name"),
        ("/api/workers", {"within": "soon"}, "within"),
        ("/api/workers", {"within": "0"}, "within"),
        ("/api/workers", {"within": "8d"}, "within"),
        ("/api/workers", {"within": "-1h"}, "within"),
    ],
)
def test_workers_and_stats_refuse_bad_parameters(
    client: httpx.Client, path: str, params: dict[str, str], field: str
) -> None:
    assert_refused(client.get(path, params=params), field)


def test_names(client: httpx.Client, tasks: int) -> None:
    assert client.get("/api/names").json() == {"names": ["app.add", "app.mul"]}


# -- metrics -------------------------------------------------------------------------------------


def test_metrics_per_name_families(server: Running, client: httpx.Client) -> None:
    now = now_ms()
    add(server.book, "a1", now, "app.add", "w1", "succeeded", runtime_ms=50)
    add(server.book, "a2", now, "app.add", "w1", "succeeded", runtime_ms=700)
    add(server.book, "a3", now, "app.add", "w1", "failed", runtime_ms=4_000_000)
    add(server.book, "m1", now, "app.mul", "w2")
    text = client.get("/metrics").text
    families = {family.name: family for family in text_string_to_metric_families(text)}
    assert families["asyncbook_task_started"].type == "counter"
    started = {s.labels["name"]: s.value for s in families["asyncbook_task_started"].samples}
    assert started == {"app.add": 3.0, "app.mul": 1.0}
    assert families["asyncbook_task_ended"].type == "counter"
    ended = {
        (s.labels["name"], s.labels["state"]): s.value
        for s in families["asyncbook_task_ended"].samples
    }
    assert ended[("app.add", "succeeded")] == 2.0
    assert ended[("app.add", "failed")] == 1.0
    assert ended[("app.mul", "succeeded")] == 0.0
    assert {state for _, state in ended} == {"succeeded", "failed", "expired", "cancelled"}
    runtime = families["asyncbook_task_runtime_seconds"]
    assert runtime.type == "histogram"
    samples = [s for s in runtime.samples if s.labels["name"] == "app.add"]
    buckets = {s.labels["le"]: s.value for s in samples if s.name.endswith("_bucket")}
    assert list(buckets) == [str(bound / 1000) for bound in RUNTIME_BUCKETS_MS] + ["+Inf"]
    assert buckets["0.1"] == 1.0
    assert buckets["0.5"] == 1.0
    assert buckets["1.0"] == 2.0
    assert buckets["3600.0"] == 2.0
    assert buckets["+Inf"] == 3.0
    by_name = {s.name: s.value for s in samples}
    assert by_name["asyncbook_task_runtime_seconds_count"] == 3.0
    assert by_name["asyncbook_task_runtime_seconds_sum"] == pytest.approx(4000.75)
    assert 'asyncbook_tasks{state="succeeded"} 2.0' in text  # the old families stay


# -- documentation, pages, auth ------------------------------------------------------------------


def test_openapi_documents_the_console(client: httpx.Client) -> None:
    schema = client.get("/openapi.json").json()
    search = {p["name"]: p for p in schema["paths"]["/api/search"]["get"]["parameters"]}
    assert " ".join(search) == "name state worker q since until sort limit after"
    pattern = re.compile(search["sort"]["schema"]["pattern"])
    for sort in ("newest", "oldest", "runtime", "-runtime", "runtime:desc", "attempts:asc"):
        assert pattern.match(sort), sort
    assert not pattern.match("random")
    assert search["limit"]["schema"]["maximum"] == 1000
    listing = schema["paths"]["/api/tasks"]["get"]["parameters"]
    assert [p["name"] for p in listing] == list(search)  # /api/tasks takes the same filters
    workers = schema["paths"]["/api/workers"]["get"]["parameters"]
    assert [p["name"] for p in workers] == ["within"]
    stats = schema["paths"]["/api/stats"]["get"]["parameters"]
    assert [p["name"] for p in stats] == ["name", "window"]
    assert "/api/names" in schema["paths"]
    components = schema["components"]["schemas"]
    for name in ("SearchPage", "TaskInfo", "WorkerSummary", "TaskStats", "TaskWithInfo"):
        assert name in components
    task = schema["paths"]["/api/tasks/{id}"]["get"]["responses"]["200"]
    assert task["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/TaskWithInfo"
    }


@pytest.mark.parametrize(("path", "page"), [("/workers", "workers.html"), ("/stats", "stats.html")])
def test_console_pages_are_served(client: httpx.Client, path: str, page: str) -> None:
    response = client.get(path)
    assert response.status_code == 200, response.text
    assert "text/html" in response.headers["content-type"]
    assert client.post(path).status_code == 405


def test_console_needs_the_token() -> None:
    with (
        running_server(token=TOKEN) as server,
        httpx.Client(base_url=server.url, timeout=10) as client,
    ):
        good = {"Authorization": "Bearer " + TOKEN}
        for path in ("/api/search", "/api/workers", "/api/stats", "/api/names"):
            assert client.get(path).status_code == 401
            assert client.get(path, headers=good).status_code == 200
        for page in ("/workers", "/stats"):
            response = client.get(page)
            assert response.status_code == 303
            assert response.headers["location"].startswith("/login")


def test_a_book_without_info_has_no_console() -> None:
    book = MemoryBook()
    book.create(id="m", now_ms=now_ms(), ttl_ms=HOUR, max_attempts=1)
    with (
        BackgroundServer(book) as server,
        httpx.Client(base_url=server.url.rstrip("/"), timeout=10) as client,
    ):
        for path in ("/api/search", "/api/workers", "/api/stats", "/api/names", "/workers"):
            assert client.get(path).status_code == 404, path
        task = client.get(task_path("m"))
        assert task.content == JSONResponse(to_wire(book.get("m"))).body  # type: ignore[arg-type]
        assert "asyncbook_task_started" not in client.get("/metrics").text
        schema = client.get("/openapi.json").json()
        assert "/api/search" not in schema["paths"]
        assert "TaskInfo" not in schema["components"]["schemas"]
        listing = client.get("/api/tasks", params={"state": "queued"}).json()
        assert set(listing) == {"tasks"}  # as before: no info, no totals
        refused = client.get("/api/tasks", params={"name": "app.add"})
        assert refused.status_code == 400
        assert refused.json()["field"] == "name"


# -- parsing ---------------------------------------------------------------------------------------


def test_parse_duration_and_time() -> None:
    assert parse_duration("90s", "w") == 90_000
    assert parse_duration("10m", "w") == 600_000
    assert parse_duration("2h", "w") == 7_200_000
    assert parse_duration("1d", "w") == 86_400_000
    assert parse_duration("250ms", "w") == 250
    assert parse_duration("1500", "w") == 1500
    now = 10 * 86_400_000
    assert parse_moment("10m", "since", now) == now - 600_000
    assert parse_moment("11d", "since", now) == 0  # before the epoch: from the start
    assert parse_moment("1700000000000", "since", now) == 1_700_000_000_000
    assert parse_moment("1970-01-02T00:00:00Z", "since", now) == 86_400_000
    assert parse_moment("1970-01-02", "since", now) == 86_400_000  # no offset: UTC
    assert parse_moment("1970-01-02T02:00:00+02:00", "since", now) == 86_400_000
    for bad in ("", "1w", "10 m", "m", "ten", "1970-01-01T00:00:00+01:00"):
        with pytest.raises(AsyncBookError) as caught:
            parse_moment(bad, "since", now)
        assert caught.value.field == "since"


def test_the_listing_says_how_far_behind_the_index_is(
    server: Running, client: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The indexes are built from the writes' changes: a read that could not catch up (here
    it may apply no batch at all) answers all the same and says how far behind it is."""
    now = now_ms()
    for n in range(3):
        add(server.book, f"lag-{n}", now, "app.add", "w1", "succeeded")  # 3 changes each
    monkeypatch.setattr(indexer.caught_up, "__defaults__", (0,))
    body = client.get("/api/tasks").json()
    assert body["tasks"] == []  # not indexed yet
    assert body["indexLag"]["entries"] == 9
    assert 0 <= body["indexLag"]["oldestAgeMs"] < 60_000
    assert client.get("/api/search").json()["indexLag"]["entries"] == 9
    monkeypatch.undo()
    body = client.get("/api/tasks").json()
    assert body["indexLag"] == {"entries": 0}
    assert [task["id"] for task in body["tasks"]] == ["lag-2", "lag-1", "lag-0"]
    assert body["totals"]["succeeded"] == 3
