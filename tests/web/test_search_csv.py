"""``GET /api/search.csv``: a search downloaded as CSV, the rows ``asyncbook ls --csv``
prints (one implementation, ``asyncbook._task_csv``), bounded, with a cursor for the rest;
on RedisBook with real Redis, and absent over a book without task info."""

from __future__ import annotations

import csv
import io
import time

import httpx
import pytest

from asyncbook import FailEvent, MemoryBook, RedisBook, StartEvent
from asyncbook._book import CreateSpec
from asyncbook._console import PublishInfo, TaskQuery
from asyncbook._task_csv import CSV_COLUMNS, csv_text
from asyncbook.web import BackgroundServer

from ..support.web_server import Running, assert_error, running_server

pytestmark = pytest.mark.redis

HOUR = 3_600_000
CSV_PATH = "/api/search.csv"


def rows_of(response: httpx.Response) -> list[list[str]]:
    return list(csv.reader(io.StringIO(response.text)))


@pytest.fixture
def crafted(server: Running) -> int:
    """Three tasks, one failed with a name, queue and error a spreadsheet would run."""
    book = server.book
    now = book.now_ms()
    book.create(
        id="plain", now_ms=now - 3_000, ttl_ms=HOUR, max_attempts=1,
        info=PublishInfo(name="mail.send", queue="mail"),
    )  # fmt: skip
    book.create(
        id="evil", now_ms=now - 2_000, ttl_ms=HOUR, max_attempts=1,
        info=PublishInfo(name='=HYPERLINK("http://x.invalid","y")', queue="-q"),
    )  # fmt: skip
    book.apply("evil", StartEvent(at_ms=now - 1_900, worker="@w"))
    book.apply("evil", FailEvent(at_ms=now - 1_000, error="+boom", retryable=False))
    book.create(id="bare", now_ms=now - 1_000, ttl_ms=HOUR, max_attempts=1)
    return now


def test_the_download_is_the_rows_ls_csv_prints(
    server: Running, client: httpx.Client, crafted: int
) -> None:
    response = client.get(CSV_PATH)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/csv")
    assert response.headers["content-disposition"].startswith("attachment;")
    assert "x-next-after" not in response.headers
    page = server.book.search(TaskQuery(limit=1000))
    assert response.text == csv_text(page.tasks)
    rows = rows_of(response)
    assert tuple(rows[0]) == CSV_COLUMNS
    assert [row[0] for row in rows[1:]] == ["bare", "evil", "plain"]
    evil = dict(zip(CSV_COLUMNS, rows[2], strict=True))
    assert evil["name"].startswith("'=")
    assert (evil["queue"], evil["worker"], evil["error"]) == ("'-q", "'@w", "'+boom")


def test_the_search_parameters_filter_and_sort(client: httpx.Client, crafted: int) -> None:
    failed = rows_of(client.get(CSV_PATH, params={"state": "failed"}))
    assert [row[0] for row in failed[1:]] == ["evil"]
    named = rows_of(client.get(CSV_PATH, params={"name": "mail.send", "state": ""}))
    assert [row[0] for row in named[1:]] == ["plain"]
    oldest = rows_of(client.get(CSV_PATH, params={"sort": "oldest"}))
    assert [row[0] for row in oldest[1:]] == ["plain", "evil", "bare"]
    none = rows_of(client.get(CSV_PATH, params={"q": "nothing-"}))
    assert none == [list(CSV_COLUMNS)]


def test_a_download_is_bounded_and_the_cursor_gives_the_rest(
    server: Running, client: httpx.Client
) -> None:
    now = server.book.now_ms()
    count = 1_205  # more than one page of the search (1000)
    specs = [
        CreateSpec(id=f"t{i:05d}", now_ms=now - count + i, ttl_ms=HOUR, max_attempts=1)
        for i in range(count)
    ]
    assert not [r for r in server.book.create_many(specs) if isinstance(r, Exception)]
    first = client.get(CSV_PATH, params={"limit": "1100", "sort": "oldest"})
    assert first.status_code == 200
    ids = [row[0] for row in rows_of(first)[1:]]
    assert ids == [f"t{i:05d}" for i in range(1100)]
    cursor = first.headers["x-next-after"]
    rest = client.get(CSV_PATH, params={"after": cursor, "sort": "oldest"})
    assert "x-next-after" not in rest.headers
    assert [row[0] for row in rows_of(rest)[1:]] == [f"t{i:05d}" for i in range(1100, count)]
    whole = client.get(CSV_PATH)
    assert len(rows_of(whole)) == count + 1


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "10001"}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"state": "lost"}, "state"),
        ({"sort": "sideways"}, "sort"),
        ({"after": "x"}, "after"),
        ({"since": "yesterday"}, "since"),
    ],
)
def test_a_bad_parameter_is_a_400_naming_it(
    client: httpx.Client, crafted: int, params: dict[str, str], field: str
) -> None:
    refused = assert_error(client.get(CSV_PATH, params=params), 400, "invalid-request")
    assert refused["field"] == field


def test_the_route_is_documented(client: httpx.Client) -> None:
    operation = client.get("/openapi.json").json()["paths"][CSV_PATH]["get"]
    names = {parameter["name"] for parameter in operation["parameters"]}
    assert {"name", "state", "worker", "q", "since", "until", "sort", "limit", "after"} <= names
    answer = operation["responses"]["200"]
    assert "text/csv" in answer["content"]
    assert "X-Next-After" in answer["headers"]


def test_a_book_without_info_has_no_download() -> None:
    book = MemoryBook()
    book.create(id="m", now_ms=int(time.time() * 1000), ttl_ms=HOUR, max_attempts=1)
    with (
        BackgroundServer(book) as server,
        httpx.Client(base_url=server.url.rstrip("/"), timeout=10) as client,
    ):
        assert client.get(CSV_PATH).status_code == 404


def test_the_rows_are_read_from_the_book_once_per_page(server: Running) -> None:
    """The book (not a copy) is searched: a task created now is in the next download."""
    book: RedisBook = server.book
    book.create(id="late", now_ms=book.now_ms(), ttl_ms=HOUR, max_attempts=1)
    with httpx.Client(base_url=server.url, timeout=10) as client:
        assert [row[0] for row in rows_of(client.get(CSV_PATH))[1:]] == ["late"]


def test_the_download_needs_the_token_when_the_server_has_one() -> None:
    token = "s3cret-s3cret-s3cret"
    with (
        running_server(token=token) as server,
        httpx.Client(base_url=server.url, timeout=10) as client,
    ):
        assert client.get(CSV_PATH).status_code == 401
        signed = client.get(CSV_PATH, headers={"Authorization": f"Bearer {token}"})
        assert signed.status_code == 200
        assert tuple(rows_of(signed)[0]) == CSV_COLUMNS


@pytest.mark.parametrize("lead", ["\n", "\r\n", "\t", " ", "\n \t", "\x00", "\ufeff"])
@pytest.mark.parametrize("formula", ['=HYPERLINK("http://x.invalid","y")', "+1", "-1", "@A1"])
def test_a_formula_after_leading_blanks_is_defused(
    server: Running, client: httpx.Client, lead: str, formula: str
) -> None:
    book = server.book
    now = book.now_ms()
    value = lead + formula
    book.create(
        id="blank", now_ms=now, ttl_ms=HOUR, max_attempts=1,
        info=PublishInfo(name=value, queue=value),
    )  # fmt: skip
    row = dict(zip(CSV_COLUMNS, rows_of(client.get(CSV_PATH))[1], strict=True))
    assert (row["name"], row["queue"]) == ("'" + value, "'" + value)
