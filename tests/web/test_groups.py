"""Groups on the status server: ``/api/groups/<id>``, its stream and the group page, over
HTTP on RedisBook with real Redis (and the group hub's rounds on an in-memory book)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import httpx
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.backoff import NoBackoff
from redis.retry import Retry

from asyncbook import MemoryBook, ProgressEvent, RedisBook, StartEvent, SucceedEvent
from asyncbook.web import BackgroundServer, Change, LocalChangeFeed
from asyncbook.web import _groups as groups_module
from asyncbook.web._groups import GroupHub
from asyncbook.web._hub import Batch
from asyncbook.web._paths import group_path, split_group_path
from asyncbook.web._reader import InPlaceReader

from ..support.servers import free_port
from ..support.web_server import Running, assert_error, get_raw, running_server, sse_events

T = TypeVar("T")

pytestmark = pytest.mark.redis

NOW = 1_000_000
FAR = 10**15
TOKEN = "s3cret-s3cret-s3cret"
GROUP_IDS = ["a/b", "50%", "with space", "ünï/cödé ✓", "x/stream", "stream", "{tag}:1", "a\nb"]


def make_group(book: Any, group_id: str, count: int, *, seal: bool = True) -> list[str]:
    """``count`` queued members ``<group>#<n>``, the group sealed at ``count`` by default."""
    ids = [f"{group_id}#{n}" for n in range(count)]
    for task_id in ids:
        book.create(id=task_id, now_ms=NOW, ttl_ms=FAR, max_attempts=2, group_id=group_id)
    if seal:
        book.seal_group(group_id, count)
    return ids


def feed_caught_up(server: Running, client: httpx.Client) -> None:
    """Return once the server's change feed has passed every change published so far.

    The feed is a channel: changes arrive in order. A marker group's member is moved with
    a stream open on it; once that change comes back, every earlier one (the creations of
    a group a test is about to watch) has been seen, and cannot reach a later watcher.
    """
    (marker,) = make_group(server.book, f"feed-mark-{time.monotonic_ns()}", 1)
    group_id = marker.rpartition("#")[0]
    with client.stream("GET", group_path(group_id, "stream")) as response:
        for event in sse_events(response):
            if event["event"] == "group":
                start(server.book, marker)
            elif event["event"] == "member":
                return


def start(book: Any, task_id: str) -> None:
    book.apply(task_id, StartEvent(at_ms=NOW + 1, worker="w"))


def advance(book: Any, task_id: str, progress: int) -> None:
    book.apply(task_id, ProgressEvent(at_ms=NOW + 2, progress=progress, cursor=str(progress)))


def succeed(book: Any, task_id: str) -> None:
    book.apply(task_id, SucceedEvent(at_ms=NOW + 3, result_ref="r", result_hash="h"))


def stream_all(client: httpx.Client, group_id: str, **headers: str) -> list[dict[str, Any]]:
    with client.stream("GET", group_path(group_id, "stream"), headers=headers) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        return list(sse_events(response))


def wait_for(check: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


# -- the group ----------------------------------------------------------------------------


def test_group_is_its_summary_and_its_first_members(server: Running, client: httpx.Client) -> None:
    book = server.book
    ids = make_group(book, "batch-7", 4)
    start(book, ids[0])
    advance(book, ids[0], 60)
    start(book, ids[1])
    succeed(book, ids[1])
    book.cancel(ids[2], "no longer needed")
    body = client.get(group_path("batch-7")).json()
    assert body["groupId"] == "batch-7"
    assert (body["total"], body["members"], body["ended"]) == (4, 4, False)
    assert body["counts"] == {
        "queued": 1,
        "running": 1,
        "succeeded": 1,
        "failed": 0,
        "expired": 0,
        "cancelled": 1,
    }
    assert body["progress"] == 40  # (60 + 100 + 0 + 0) / 4
    assert [task["id"] for task in body["tasks"]] == ids  # creation order
    assert all("history" not in task for task in body["tasks"])
    assert body["tasks"][0]["progress"] == 60
    assert body["tasks"][2]["error"] == "no longer needed"
    summary = book.group("batch-7")
    assert summary is not None
    assert {k: v for k, v in body.items() if k != "tasks"} == summary.model_dump(
        mode="json", by_alias=True, exclude_none=True
    )


def test_a_group_not_declared_yet_has_no_total(server: Running, client: httpx.Client) -> None:
    make_group(server.book, "open", 2, seal=False)
    body = client.get(group_path("open")).json()
    assert "total" not in body
    assert body["members"] == 2
    assert body["ended"] is False


def test_limit_bounds_the_members_listed(server: Running, client: httpx.Client) -> None:
    book = server.book
    ids = make_group(book, "big", 120)
    assert len(client.get(group_path("big")).json()["tasks"]) == 100  # the default
    assert len(client.get(group_path("big"), params={"limit": ""}).json()["tasks"]) == 100
    two = client.get(group_path("big"), params={"limit": "2"}).json()
    assert [task["id"] for task in two["tasks"]] == ids[:2]
    assert two["members"] == 120  # the counts cover every member, whatever is listed
    assert len(client.get(group_path("big"), params={"limit": "1000"}).json()["tasks"]) == 120


@pytest.mark.parametrize("limit", ["0", "1001", "-1", "ten", "1.5", "1e3", " ", "9" * 30])
def test_bad_limits_are_400(server: Running, client: httpx.Client, limit: str) -> None:
    make_group(server.book, "g", 1)
    response = client.get(group_path("g"), params={"limit": limit})
    assert assert_error(response, 400, "invalid-request")["field"] == "limit"


def test_unknown_group_is_404_for_the_group_and_its_stream(client: httpx.Client) -> None:
    for path in (group_path("nope"), group_path("nope", "stream")):
        body = assert_error(client.get(path), 404, "not-found")
        assert body["field"] == "groupId"
        assert "nope" in body["message"]


def test_a_task_is_not_a_group(server: Running, client: httpx.Client) -> None:
    server.book.create(id="solo", now_ms=NOW, ttl_ms=FAR, max_attempts=1)
    assert_error(client.get(group_path("solo")), 404, "not-found")


@pytest.mark.parametrize("group_id", GROUP_IDS)
def test_group_ids_of_any_shape_work_percent_encoded(
    server: Running, client: httpx.Client, group_id: str
) -> None:
    ids = make_group(server.book, group_id, 2)
    body = client.get(group_path(group_id))
    assert body.status_code == 200, body.text
    assert body.json()["groupId"] == group_id
    assert [task["id"] for task in body.json()["tasks"]] == ids
    first = stream_first(client, group_path(group_id, "stream"))
    assert first["event"] == "group"
    assert first["data"]["groupId"] == group_id


@pytest.mark.parametrize("group_id", [".", ".."])
def test_dot_ids_travel_in_the_query(server: Running, client: httpx.Client, group_id: str) -> None:
    make_group(server.book, group_id, 1)
    assert group_path(group_id) == "/api/groups/" + group_id.replace(".", "%2E")
    body = client.get("/api/groups/", params={"id": group_id, "limit": "1"}).json()
    assert body["groupId"] == group_id
    first = stream_first(client, "/api/groups//stream?id=" + group_id)
    assert first["data"]["groupId"] == group_id


def stream_first(client: httpx.Client, path: str, **headers: str) -> dict[str, Any]:
    """The first event of a stream (then the stream is closed)."""
    with client.stream("GET", path, headers=headers) as response:
        assert response.status_code == 200, response.read()
        return next(sse_events(response))


def test_a_group_id_ending_in_stream_is_not_its_stream(
    server: Running, client: httpx.Client
) -> None:
    make_group(server.book, "x", 1)
    make_group(server.book, "x/stream", 3)
    assert client.get(group_path("x/stream")).json()["members"] == 3
    assert stream_first(client, "/api/groups/x/stream")["data"]["groupId"] == "x"
    assert stream_first(client, "/api/groups/x%2Fstream/stream")["data"]["members"] == 3


@pytest.mark.parametrize("raw", [b"/api/gr%6Fups/G", b"/%61pi/groups/G", b"/api/groups/%47"])
def test_an_encoded_prefix_reaches_the_same_group(
    server: Running, client: httpx.Client, raw: bytes
) -> None:
    make_group(server.book, "G", 1)
    response = client.get(httpx.URL(server.url).copy_with(raw_path=raw))
    assert response.json()["groupId"] == "G"


@pytest.mark.parametrize("raw", [b"/api/groups%2FG", b"/api%2Fgroups/G"])
def test_an_encoded_slash_in_the_prefix_names_no_group(
    server: Running, client: httpx.Client, raw: bytes
) -> None:
    make_group(server.book, "G", 1)
    assert_error(client.get(httpx.URL(server.url).copy_with(raw_path=raw)), 404, "not-found")


def test_bad_group_paths_and_methods(client: httpx.Client) -> None:
    body = assert_error(client.get("/api/groups/%FF%FE"), 400, "invalid-request")
    assert body["field"] == "groupId"
    assert assert_error(client.get("/api/groups/"), 400, "invalid-request")["field"] == "groupId"
    blank = assert_error(client.get("/api/groups/%20"), 400, "invalid-request")
    assert blank["field"] == "groupId"
    assert_error(client.get("/api/groups/%20/stream"), 400, "invalid-request")
    for method, path in (("POST", "/api/groups/g"), ("DELETE", "/api/groups/g/stream")):
        response = client.request(method, path)
        assert_error(response, 405, "method-not-allowed")
        assert response.headers["allow"] == "GET"
    response = client.post("/groups/g")
    assert_error(response, 405, "method-not-allowed")
    assert "GET" in response.headers["allow"]


def test_split_group_path() -> None:
    assert split_group_path(b"/api/groups/a%2Fb/stream") == ("a/b", "stream")
    assert split_group_path(b"/api/groups/a/b") == ("a/b", None)
    assert split_group_path(b"/api/groups/stream") == ("stream", None)
    assert split_group_path(b"/api/groups//stream", "..") == ("..", "stream")
    assert split_group_path(b"/api/groups/x/events") == ("x/events", None)  # not a suffix here
    assert group_path("a/b c%", "stream") == "/api/groups/a%2Fb%20c%25/stream"
    assert group_path("..") == "/api/groups/%2E%2E"


# -- the stream -----------------------------------------------------------------------------


def test_stream_sends_each_member_change_then_the_summary_then_end(
    server: Running, client: httpx.Client
) -> None:
    """One step at a time (the next once the last was seen): the exact events, in order."""
    book = server.book
    a, b = make_group(book, "pair", 2)
    feed_caught_up(server, client)  # the creations are not news to the stream below
    steps: list[Callable[[], None]] = [
        lambda: start(book, a),
        lambda: advance(book, a, 50),
        lambda: start(book, b),
        lambda: succeed(book, a),
        lambda: advance(book, b, 40),
        lambda: succeed(book, b),
    ]
    seen: list[tuple[str, Any]] = []
    summaries: list[dict[str, Any]] = []
    with client.stream("GET", group_path("pair", "stream")) as response:
        for event in sse_events(response):
            if event["event"] == "member":
                assert event["id"] == event["data"]["version"]
                assert "history" not in event["data"]
                seen.append(("member", (event["data"]["id"], event["id"])))
            else:
                seen.append((event["event"], None))
            if event["event"] == "group":
                summaries.append(event["data"])
                if steps:
                    steps.pop(0)()
            if event["event"] == "end":
                ending = event["data"]
    assert seen == [
        ("group", None),
        ("member", (a, 1)),
        ("group", None),
        ("member", (a, 2)),
        ("group", None),
        ("member", (b, 1)),
        ("group", None),
        ("member", (a, 3)),
        ("group", None),
        ("member", (b, 2)),
        ("group", None),
        ("member", (b, 3)),
        ("group", None),
        ("end", None),
    ]
    assert [s["progress"] for s in summaries] == [0, 0, 25, 25, 50, 70, 100]
    assert [s["counts"]["running"] for s in summaries] == [0, 1, 1, 2, 1, 1, 0]
    assert [s["ended"] for s in summaries] == [False] * 6 + [True]
    assert ending == {
        "groupId": "pair",
        "total": 2,
        "counts": {
            "queued": 0,
            "running": 0,
            "succeeded": 2,
            "failed": 0,
            "expired": 0,
            "cancelled": 0,
        },
    }


def test_stream_follows_a_busy_group_to_its_end(server: Running, client: httpx.Client) -> None:
    """Members changing at once: bursts coalesce, but every member's last version arrives,
    each member's versions only grow, and the group's last summary says it ended."""
    book = server.book
    ids = make_group(book, "busy", 5)

    def work() -> None:
        for step in range(1, 6):
            for task_id in ids:
                if step == 1:
                    start(book, task_id)
                advance(book, task_id, step * 20 - 10)
        for task_id in ids:
            succeed(book, task_id)

    worker = threading.Thread(target=work)
    events: list[dict[str, Any]] = []
    with client.stream("GET", group_path("busy", "stream")) as response:
        for event in sse_events(response):
            events.append(event)
            if len(events) == 1:
                worker.start()  # once the stream has sent its first summary
    worker.join()
    assert events[0]["event"] == "group"
    assert [e["event"] for e in events[-2:]] == ["group", "end"]
    assert events[-2]["data"]["ended"] is True
    assert events[-2]["data"]["progress"] == 100
    versions: dict[str, list[int]] = {}
    for event in events:
        if event["event"] == "member":
            versions.setdefault(event["data"]["id"], []).append(event["id"])
    assert sorted(versions) == sorted(ids)
    for seen in versions.values():
        assert seen == sorted(set(seen))
        assert seen[-1] == 7  # start, five progress reports, succeed
    assert events[-3]["event"] == "member"  # the summary follows the members it covers


def test_a_new_stream_starts_with_the_summary_and_an_ended_group_ends_at_once(
    server: Running, client: httpx.Client
) -> None:
    book = server.book
    ids = make_group(book, "done", 2)
    start(book, ids[0])
    advance(book, ids[0], 30)
    first = stream_first(client, group_path("done", "stream"))
    assert first["event"] == "group"
    assert first["data"]["progress"] == 15
    for task_id in ids:
        start(book, task_id)
        succeed(book, task_id)
    events = stream_all(client, "done", **{"Last-Event-ID": "2"})  # no resume: starts over
    assert [e["event"] for e in events] == ["group", "end"]
    assert events[0]["data"]["ended"] is True


def test_watchers_cost_no_lookups_while_their_group_is_quiet(
    server: Running, client: httpx.Client
) -> None:
    book = server.book
    ids = make_group(book, "quiet", 2)
    others = make_group(book, "other", 1)
    book.create(id="loner", now_ms=NOW, ttl_ms=FAR, max_attempts=1)
    groups = server.app.state.groups
    results: list[list[dict[str, Any]]] = []

    def watch() -> None:
        with httpx.Client(base_url=server.url, timeout=20) as own:
            results.append(stream_all(own, "quiet"))

    threads = [threading.Thread(target=watch) for _ in range(10)]
    for thread in threads:
        thread.start()
    wait_for(lambda: groups.watcher_count == 10)
    wait_for(lambda: not groups._running)  # each was sent its summary
    time.sleep(0.3)
    idle = groups.lookups
    time.sleep(0.5)
    start(book, "loner")  # not a member of any group
    start(book, others[0])  # a member of a group nobody watches
    time.sleep(0.5)
    assert groups.lookups == idle  # nobody polls; other tasks and groups cost nothing
    metrics = client.get("/metrics").text
    assert "asyncbook_group_stream_watchers 10.0" in metrics
    for task_id in ids:
        start(book, task_id)
        succeed(book, task_id)
    for thread in threads:
        thread.join(15)
    assert len(results) == 10
    for events in results:
        assert events[-1]["event"] == "end"
    # Four changes, shared by all ten watchers: at most one round each.
    assert groups.lookups - idle <= 4
    assert groups.watcher_count == 0


def test_group_streams_and_lookups_of_an_unreachable_book_are_503() -> None:
    port = free_port()  # closed again: nothing listens there
    client = redis.Redis(port=port, socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))
    with (
        BackgroundServer(RedisBook(client, namespace="down"), LocalChangeFeed()) as server,
        httpx.Client(base_url=server.url, timeout=20) as http,
    ):
        for path in (group_path("g")[1:], group_path("g", "stream")[1:]):
            assert_error(http.get(path), 503, "unavailable")
        assert server.app.state.groups.watcher_count == 0
    client.close()


# -- the hub's rounds, on an in-memory book ------------------------------------------------


def publish(book: MemoryBook, hub: GroupHub, task_id: str, group_id: str) -> None:
    task = book.get(task_id)
    assert task is not None
    hub.on_change(Change(task_id, task.version, task.state.value, task.progress, group_id))


def drain(queue: asyncio.Queue[Batch | BaseException]) -> list[str]:
    """The event names of every batch waiting in a watcher's queue."""
    names: list[str] = []
    while not queue.empty():
        batch = queue.get_nowait()
        assert isinstance(batch, Batch)
        names += [line[7:] for line in batch.payload.decode().splitlines() if line[:7] == "event: "]
    return names


def test_a_burst_of_changes_costs_one_round_while_one_is_in_flight() -> None:
    book = MemoryBook()
    ids = make_group(book, "g", 5)

    async def scenario() -> tuple[int, list[str]]:
        gate = asyncio.Event()
        in_flight = 0
        most = 0

        class Gated(InPlaceReader):
            """Each call of the book waits at the gate."""

            async def call(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
                nonlocal in_flight, most
                in_flight += 1
                most = max(most, in_flight)
                await gate.wait()
                in_flight -= 1
                return fn(*args, **kwargs)

        hub = GroupHub(Gated(book))
        watcher = hub.watch("g")
        while not in_flight:  # its first round waits at the gate
            await asyncio.sleep(0)
        for task_id in ids:
            start(book, task_id)
            publish(book, hub, task_id, "g")
            for progress in (10, 20, 30):
                advance(book, task_id, progress)
                publish(book, hub, task_id, "g")
        gate.set()
        while hub._running:
            await asyncio.sleep(0.001)
        assert most == 1  # never two lookups of one group at once
        return hub.lookups, drain(watcher.queue)

    lookups, names = asyncio.run(scenario())
    assert lookups == 2  # 20 changes: the first round, then one for all of them
    assert names == ["group", *["member"] * 5, "group"]


def test_a_feed_reset_sends_resync_and_the_summary() -> None:
    book = MemoryBook()
    (task_id,) = make_group(book, "g", 1)

    async def scenario() -> list[str]:
        hub = GroupHub(book)
        watcher = hub.watch("g")
        while hub._running:
            await asyncio.sleep(0.001)
        start(book, task_id)  # never announced: the feed was away
        hub.on_reset()
        while hub._running:
            await asyncio.sleep(0.001)
        hub.on_change(Change("elsewhere", 1, "running", 0, None))  # no group: ignored
        return drain(watcher.queue)

    assert asyncio.run(scenario()) == ["group", "resync", "group"]


def test_end_comes_after_every_members_last_version() -> None:
    """The last changes may still be on their way when the counters say "ended": the
    members are read once more, so a stream never ends before its members' last state."""
    book = MemoryBook()
    ids = make_group(book, "g", 3)

    async def scenario() -> list[str]:
        hub = GroupHub(book)
        watcher = hub.watch("g")
        while hub._running:
            await asyncio.sleep(0.001)
        for task_id in ids:
            start(book, task_id)
            succeed(book, task_id)
        publish(book, hub, ids[0], "g")  # the only change heard so far
        while hub._running:
            await asyncio.sleep(0.001)
        chunks: list[str] = []
        while not watcher.queue.empty():
            batch = watcher.queue.get_nowait()
            assert isinstance(batch, Batch)
            chunks.append(batch.payload.decode())
        assert hub.watcher_count == 0
        return chunks

    first, last = asyncio.run(scenario())
    assert first.startswith("event: group\n")
    events = [line[7:] for line in last.splitlines() if line.startswith("event: ")]
    assert events == ["member", "member", "member", "group", "end"]
    for task_id in ids:
        assert f'"id":"{task_id}","state":"succeeded"' in last


def test_a_new_watcher_of_an_ended_group_gets_the_summary_and_end_only() -> None:
    book = MemoryBook()
    ids = make_group(book, "g", 2)
    for task_id in ids:
        start(book, task_id)
        succeed(book, task_id)

    async def scenario() -> list[str]:
        hub = GroupHub(book)
        watcher = hub.watch("g")
        while hub._running:
            await asyncio.sleep(0.001)
        return drain(watcher.queue)

    assert asyncio.run(scenario()) == ["group", "end"]


def test_a_reader_too_slow_is_closed_without_end_to_start_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(groups_module, "WATCHER_BACKLOG", 3)
    book = MemoryBook()
    (task_id,) = make_group(book, "g", 1)
    start(book, task_id)

    async def scenario() -> list[Batch | BaseException]:
        hub = GroupHub(book)
        watcher = hub.watch("g")
        for progress in range(1, 10):
            while hub._running:
                await asyncio.sleep(0.001)
            advance(book, task_id, progress)
            publish(book, hub, task_id, "g")
        while hub._running:
            await asyncio.sleep(0.001)
        assert hub.watcher_count == 0
        left: list[Batch | BaseException] = []
        while not watcher.queue.empty():
            left.append(watcher.queue.get_nowait())
        return left

    assert asyncio.run(scenario()) == [Batch(payload=b"", end=True)]


class VanishingBook(MemoryBook):
    """A book whose groups can be made to vanish (as a pruned group would)."""

    gone = False

    def group(self, group_id: str) -> Any:
        return None if self.gone else super().group(group_id)


def test_a_group_that_disappears_ends_its_streams_with_an_error() -> None:
    book = VanishingBook()
    (task_id,) = make_group(book, "g", 1)

    async def scenario() -> list[Any]:
        hub = GroupHub(book)
        watcher = hub.watch("g")
        while hub._running:
            await asyncio.sleep(0.001)
        book.gone = True  # pruned behind the server's back
        start(book, task_id)
        publish(book, hub, task_id, "g")
        while hub._running:
            await asyncio.sleep(0.001)
        items = []
        while not watcher.queue.empty():
            items.append(watcher.queue.get_nowait())
        return items

    first, error = asyncio.run(scenario())
    assert isinstance(first, Batch)
    assert isinstance(error, groups_module.UnknownGroupError)


# -- access --------------------------------------------------------------------------------


def test_token_guards_group_reads_and_the_page_like_task_reads() -> None:
    with (
        running_server(token=TOKEN) as server,
        httpx.Client(base_url=server.url, timeout=10) as client,
    ):
        make_group(server.book, "a/b", 1)
        for path in (group_path("a/b"), group_path("a/b", "stream")):
            response = client.get(path)
            assert_error(response, 401, "unauthorized")
            assert response.headers["www-authenticate"].startswith("Bearer")
            wrong = client.get(path, headers={"Authorization": "Bearer " + TOKEN[:-1]})
            assert_error(wrong, 401, "unauthorized")
        good = {"Authorization": "Bearer " + TOKEN}
        assert client.get(group_path("a/b"), headers=good).json()["groupId"] == "a/b"
        assert stream_first(client, group_path("a/b", "stream"), **good)["event"] == "group"
        # The page redirects to the sign-in form, which comes back to it, id still encoded.
        page = client.get("/groups/a%2Fb%20c")
        assert page.status_code == 303
        assert page.headers["location"] == "/login?next=%2Fgroups%2Fa%252Fb%2520c"
        login = client.post("/login", data={"token": TOKEN, "next": "/groups/a%2Fb%20c"})
        assert login.status_code == 303
        assert login.headers["location"] == "/groups/a%2Fb%20c"
        # The cookie opens the page, the group and its stream (reads only).
        assert "/static/group.js" in client.get("/groups/a%2Fb").text
        assert client.get(group_path("a/b")).status_code == 200
        assert stream_first(client, group_path("a/b", "stream"))["data"]["groupId"] == "a/b"


@pytest.mark.parametrize("host", ["evil.example", "127.0.0.1.evil.example", ""])
def test_a_foreign_host_is_refused_for_groups(
    server: Running, client: httpx.Client, host: str
) -> None:
    make_group(server.book, "g", 1)
    for path in (group_path("g"), group_path("g", "stream"), "/groups/g"):
        response = client.get(path, headers={"Host": host})
        assert_error(response, 400, "host-not-allowed")
        assert "queued" not in response.text


# -- the page and the schema ------------------------------------------------------------------


def test_the_group_page_and_its_script_are_served(client: httpx.Client) -> None:
    for path in ("/groups/g", "/groups/a%2Fb%0Ac", "/groups/a/b", "/groups/", "/groups/?id=.."):
        page = client.get(path)
        assert page.status_code == 200, path
        assert "text/html" in page.headers["content-type"]
        assert "/static/group.js" in page.text
        assert 'name="viewport"' in page.text
    script = client.get("/static/group.js")
    assert script.status_code == 200
    assert "http" not in script.text  # no CDN, no remote anything
    assert "groupUrl" in client.get("/static/common.js").text
    assert_error(client.get("/groups"), 404, "not-found")


def test_openapi_documents_the_group_endpoints(client: httpx.Client) -> None:
    schema = client.get("/openapi.json").json()
    one = schema["paths"]["/api/groups/{id}"]["get"]
    stream = schema["paths"]["/api/groups/{id}/stream"]["get"]
    for operation in (one, stream):
        assert {"200", "400", "401", "404"} <= set(operation["responses"])
        assert operation["parameters"][0]["in"] == "path"
    assert "text/event-stream" in stream["responses"]["200"]["content"]
    for name in ("group", "member", "end", "resync"):
        assert f"`{name}`" in stream["description"]
    limit = next(p for p in one["parameters"] if p["name"] == "limit")
    assert (limit["schema"]["minimum"], limit["schema"]["maximum"]) == (1, 1000)
    assert limit["schema"]["default"] == 100
    schemas = schema["components"]["schemas"]
    body = one["responses"]["200"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/GroupDetail"}
    assert {"groupId", "members", "counts", "progress", "ended"} <= set(
        schemas["GroupSummary"]["properties"]
    )
    assert schemas["GroupDetail"]["allOf"][0] == {"$ref": "#/components/schemas/GroupSummary"}


# -- hostile input ----------------------------------------------------------------------------

HOSTILE = settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def shared() -> Iterator[Running]:
    with running_server() as running:
        make_group(running.book, "g", 2)
        yield running


@HOSTILE
@given(
    group_id=st.text(max_size=30) | st.sampled_from(["", "/", "%", "..", "g/stream"]),
    limit=st.text(max_size=12) | st.integers(-(2**70), 2**70).map(str),
)
@pytest.mark.long
def test_group_reads_never_fail(shared: Running, group_id: str, limit: str) -> None:
    with httpx.Client(base_url=shared.url, timeout=10) as client:
        path = group_path(group_id) if group_id else "/api/groups/"
        for response in (
            client.get(path, params={"limit": limit}),
            client.get(group_path("g"), params={"limit": limit}),
        ):
            assert response.status_code < 500, response.text
            if response.status_code >= 400:
                assert {"code", "message"} <= set(response.json())
        if group_id and group_id != "g":
            # An unknown or blank group: the stream is refused at once, never a 500.
            response = client.get(group_path(group_id, "stream"))
            assert 400 <= response.status_code < 500, response.text


@HOSTILE
@given(
    segment=st.text(
        st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters="?#/"),
        max_size=30,
    ),
    suffix=st.sampled_from(["", "/stream", "/x"]),
    prefix=st.sampled_from(["/api/groups/", "/groups/"]),
)
@pytest.mark.long
def test_raw_group_paths_never_fail(
    shared: Running, segment: str, suffix: str, prefix: str
) -> None:
    with httpx.Client(base_url=shared.url, timeout=10) as client:
        # A path naming the live group "g" opens a stream that stays open.
        response = get_raw(client, shared.url, prefix + segment + suffix)
    assert response.status_code < 500
    if response.status_code >= 400:
        assert {"code", "message"} <= set(response.json())
