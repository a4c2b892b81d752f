"""``/api/canvas/<id>`` over HTTP: the graph from any of its tasks, drawn as SVG, bad ids
refused naming ``rootId``; an operator cancels every open member (each cancel audited) and
resends the failed ones; the read role may look but not change."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from asyncbook._canvas import Canvas
from asyncbook.redis import AsyncRedisBook
from asyncbook.web import AccessRules
from asyncbook.web._canvas_api import read_canvas

from ..support.canvases import ended, seed_canvas, seeded
from ..support.retries import kept_message, sent
from ..support.web_server import WEB_REDIS_URL, Running, assert_error, running_server

pytestmark = pytest.mark.redis

OPERATOR = "operator-token-0123456789"
READER = "reader-token-0123456789ab"
AS_OPERATOR = {"Authorization": f"Bearer {OPERATOR}"}
AS_READER = {"Authorization": f"Bearer {READER}"}


@pytest.fixture
def server() -> Iterator[Running]:
    access = AccessRules.of(token=OPERATOR, read_token=READER)
    with running_server(access=access, broker_url=WEB_REDIS_URL) as running:
        yield running


def test_the_canvas_of_any_member_is_its_root_s_graph(
    server: Running, client: httpx.Client
) -> None:
    ids = seed_canvas(server.book, "k-")
    answer = client.get("/api/canvas/k-cb", headers=AS_READER)  # the chord's callback
    assert answer.status_code == 200, answer.text
    canvas = answer.json()
    assert canvas["rootId"] == ids["root"]
    states = {node["id"]: node.get("state") for node in canvas["nodes"]}
    assert states == {
        "k-root": "succeeded",
        "k-a": "succeeded",
        "k-b": "running",
        "group:k-g": None,
        "k-m0": "succeeded",
        "k-m1": "failed",
        "k-m2": "queued",
        "k-cb": "queued",
    }
    edges = {(e["source"], e["target"], e["kind"]) for e in canvas["edges"]}
    assert ("k-a", "k-b", "spawned") in edges
    assert ("group:k-g", "k-m1", "member") in edges
    assert ("k-m2", "k-cb", "callback") in edges
    assert canvas["open"] == 3
    assert canvas["truncated"] is False
    progress = {node["id"]: node.get("progress") for node in canvas["nodes"]}
    assert progress["k-b"] == 40
    svg = client.get("/api/canvas/k-b/svg", headers=AS_READER)
    assert svg.status_code == 200
    assert svg.headers["content-type"].startswith("image/svg+xml")
    assert svg.text.startswith("<svg")
    assert 'data-id="k-cb"' in svg.text
    page = client.get("/canvas/k-b", headers=AS_READER)
    assert page.status_code == 200
    assert "canvas.js" in page.text


def test_bad_ids_are_refused_naming_root_id(server: Running, client: httpx.Client) -> None:
    body = assert_error(client.get("/api/canvas/nobody", headers=AS_READER), 404, "not-found")
    assert body["field"] == "rootId"
    long = client.get("/api/canvas/" + "x" * 5000, headers=AS_READER)
    assert assert_error(long, 400, "invalid-request")["field"] == "rootId"
    svg = client.get("/api/canvas/nobody/svg", headers=AS_READER)
    assert assert_error(svg, 404, "not-found")["field"] == "rootId"


def test_cancel_every_open_member_each_audited(server: Running, client: httpx.Client) -> None:
    seed_canvas(server.book, "c-")
    refused = client.post("/api/canvas/c-root/cancel", json={}, headers=AS_READER)
    assert refused.status_code == 403
    assert server.book.get("c-b").state == "running"  # type: ignore[union-attr]
    answer = client.post(
        "/api/canvas/c-root/cancel", json={"reason": "bad batch"}, headers=AS_OPERATOR
    )
    assert answer.status_code == 200, answer.text
    assert sorted(answer.json()["cancelled"]) == ["c-b", "c-cb", "c-m2"]
    for task_id in ("c-b", "c-cb", "c-m2"):
        assert server.book.get(task_id).state == "cancelled"  # type: ignore[union-attr]
        [entry] = client.get(f"/api/tasks/{task_id}/audit", headers=AS_READER).json()["entries"]
        assert (entry["actor"], entry["action"], entry["reason"]) == (
            "token:operator",
            "cancel",
            "bad batch",
        )
    assert server.book.get("c-m0").state == "succeeded"  # type: ignore[union-attr]
    again = client.post("/api/canvas/c-root/cancel", headers=AS_OPERATOR).json()
    assert again["cancelled"] == []
    assert again["refused"] == []


def test_resend_the_failed_members(server: Running, client: httpx.Client, queue: str) -> None:
    book = server.book
    kept = kept_message(queue=queue).to_json()
    seeded(book, "r-root", "r-root", name="app.start")
    for n in range(3):
        seeded(book, f"r-m{n}", "r-root", "r-root", group="r-g", message=kept)
    ended(book, "r-m0", "failed")
    ended(book, "r-m1", "failed")
    ended(book, "r-m2", "succeeded")
    answer = client.post("/api/canvas/r-m2/resend", json={"reason": "retry"}, headers=AS_OPERATOR)
    assert answer.status_code == 200, answer.text
    made = {r["taskId"]: r["retriedAs"] for r in answer.json()["results"]}
    assert sorted(made) == ["r-m0", "r-m1"]
    assert answer.json()["retried"] == 2
    assert len(sent(queue)) == 2
    canvas = client.get("/api/canvas/r-root", headers=AS_READER).json()
    assert {n["id"] for n in canvas["nodes"] if n.get("resent")} == {"r-m0", "r-m1"}
    again = client.post("/api/canvas/r-root/resend", headers=AS_OPERATOR).json()
    assert again["results"] == []  # resent ones are not sent twice
    [entry] = client.get("/api/tasks/r-m0/audit", headers=AS_READER).json()["entries"]
    assert entry["action"] == "resend"
    assert entry["actor"] == "token:operator"


def test_a_sharded_canvas_is_whole_and_cancelled_on_every_shard(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[int] = []
    real = inspect.getattr_static(AsyncRedisBook, "cancel_many").awaited  # a ``Method``

    async def counted(book: AsyncRedisBook, ids: list[str], **options: Any) -> Any:
        calls.append(len(ids))
        return await real(book, ids, **options)

    monkeypatch.setattr(AsyncRedisBook, "cancel_many", counted)
    with running_server(shards=3) as sharded, httpx.Client(base_url=sharded.url) as http:
        seed_canvas(sharded.book, "s-")
        for n in range(150):  # more children than a task's info lists (100)
            seeded(sharded.book, f"s-many-{n}", "s-root", "s-a", name="app.leaf")
        canvas = http.get("/api/canvas/s-b").json()
        assert len(canvas["nodes"]) == 8 + 150
        spawned = {e["target"] for e in canvas["edges"] if e["source"] == "s-a"}
        assert len(spawned) == 151  # b and the 150, wherever their shard
        answer = http.post("/api/canvas/s-root/cancel", json={}).json()
        assert len(answer["cancelled"]) == canvas["open"] == 153
        assert http.get("/api/canvas/s-root").json()["open"] == 0
        assert calls == [153]  # one book call: one script call per shard
        for task_id in answer["cancelled"]:  # one cancel_many, one entry per member
            [entry] = sharded.book.audit(task_id)
            assert (entry.action, entry.outcome) == ("cancel", "cancelled")


def test_the_read_stops_at_its_limit_and_says_so(server: Running) -> None:
    seed_canvas(server.book, "t-")

    async def read(limit: int) -> Canvas | None:
        reader = server.book.async_twin()
        assert reader is not None
        try:
            return await read_canvas(reader, "t-b", limit)
        finally:
            await reader.aclose()

    whole, part = asyncio.run(read(2000)), asyncio.run(read(5))
    assert whole is not None
    assert part is not None
    assert not whole.truncated
    assert part.truncated
    assert sum(part.counts.values()) == 5
    assert asyncio.run(read(1)) is not None
