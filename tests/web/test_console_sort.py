"""The console's API sorted over all matches (``/api/tasks`` and ``/api/search``), its
one search box (``q``), and the 400 a bad sort gets; RedisBook on real Redis."""

from __future__ import annotations

import httpx
import pytest

from ..redis.test_console_sort import BY_RUNTIME_DESC, fill_runtimes
from ..support.web_server import Running

pytestmark = pytest.mark.redis


@pytest.fixture
def filled(server: Running) -> None:
    fill_runtimes(server.book)


def every_page(client: httpx.Client, path: str, params: dict[str, str]) -> list[str]:
    """The ids of every page, following ``nextAfter``; rows as the path gives them."""
    seen: list[str] = []
    query = dict(params)
    while True:
        body = client.get(path, params=query).json()
        rows = body["tasks"]
        seen += [row["task"]["id"] if "task" in row else row["id"] for row in rows]
        if "nextAfter" not in body:
            return seen
        query["after"] = body["nextAfter"]


@pytest.mark.parametrize("path", ["/api/tasks", "/api/search"])
@pytest.mark.parametrize("sort", ["-runtime", "runtime:desc"])
def test_sort_by_runtime_over_every_page(
    client: httpx.Client, filled: None, path: str, sort: str
) -> None:
    found = every_page(client, path, {"sort": sort, "limit": "2"})
    assert found == [*BY_RUNTIME_DESC, "r1", "q2", "q1"]
    ascending = every_page(client, path, {"sort": "runtime", "limit": "4"})
    assert ascending == ["e", "b", "f", "a", "c", "d", "q1", "q2", "r1"]
    body = client.get(path, params={"sort": sort, "limit": "2"}).json()
    assert body["totals"]["succeeded"] == 6
    assert body["totalsExact"]
    assert body["scanComplete"]


def test_sort_by_name_over_every_page(client: httpx.Client, filled: None) -> None:
    found = every_page(client, "/api/tasks", {"sort": "-name", "limit": "4"})
    assert found == ["f", "e", "d", "c", "b", "a", "r1", "q2", "q1"]


def test_the_search_box_finds_names_and_says_how(client: httpx.Client, filled: None) -> None:
    body = client.get("/api/tasks", params={"q": "shop.flaky"}).json()
    assert [task["id"] for task in body["tasks"]] == ["b", "a"]
    assert [task["matchedBy"] for task in body["tasks"]] == ["name", "name"]
    assert body["matched"] == {"id": 0, "name": 2, "text": 0}
    assert body["scanComplete"]
    search = client.get("/api/search", params={"q": "q"}).json()  # ids q1 and q2
    assert [row["task"]["id"] for row in search["tasks"]] == ["q2", "q1"]
    assert search["matched"] == {"id": 2, "name": 0, "text": 0}


@pytest.mark.parametrize("path", ["/api/tasks", "/api/search"])
@pytest.mark.parametrize("sort", ["random", "-", "runtime:up", "id", "--runtime", "RUNTIME"])
def test_a_bad_sort_is_a_400_naming_sort(client: httpx.Client, path: str, sort: str) -> None:
    response = client.get(path, params={"sort": sort})
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["field"] == "sort"
    assert "created, started, ended, runtime, attempts or name" in body["message"]


@pytest.mark.parametrize("after", ["1:" + "x" * 20_000, "nan:a", "12"])
def test_a_bad_cursor_of_a_sorted_search_is_a_400(client: httpx.Client, after: str) -> None:
    response = client.get("/api/search", params={"sort": "-runtime", "after": after})
    assert response.status_code == 400, response.text
    assert response.json()["field"] == "after"
