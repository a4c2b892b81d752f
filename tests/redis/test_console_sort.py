"""The console's search sorted over all matches (the sort indexes the task scripts keep),
and its one search box (``q``: an id prefix, a name, or text). Real Redis, fakeredis and
a Redis Cluster (test_console's ``book``)."""

from __future__ import annotations

from typing import Any

import pytest

from asyncbook import AsyncBookError, CreateSpec, PublishInfo, RedisBook, SearchPage, TaskQuery
from asyncbook.redis import _console as console
from asyncbook.redis import _name_sort as name_sort

from .test_console import HOUR, T0, book, fill, ids

__all__ = ["book"]

RUNTIMES = {"a": 300, "b": 100, "c": 300, "d": 300, "e": 50, "f": 100}
"""Runtimes (ms) of tasks that succeed: ties at 300 and 100."""
UNRUN = ("q1", "q2", "r1")
"""Created after them, without a runtime: q1 and q2 queued, r1 running."""


def fill_runtimes(book: RedisBook) -> None:
    for n, (task_id, runtime) in enumerate(RUNTIMES.items()):
        info = PublishInfo(name="shop.flaky" if task_id in "ab" else "shop.steady")
        book.create(id=task_id, now_ms=T0 + n, ttl_ms=HOUR, max_attempts=2, info=info)
        book.apply(task_id, {"type": "start", "atMs": T0 + 1000 * n, "worker": "w"}, None)
        end = {
            "type": "succeed",
            "atMs": T0 + 1000 * n + runtime,
            "resultRef": "r",
            "resultHash": "h",
        }
        book.apply(task_id, end, None)
    for n, task_id in enumerate(UNRUN, start=len(RUNTIMES)):
        book.create(id=task_id, now_ms=T0 + n, ttl_ms=HOUR, max_attempts=1)
    book.apply("r1", {"type": "start", "atMs": T0 + 9000, "worker": "w"}, None)


def every_page(book: RedisBook, **query: Any) -> list[str]:
    """The ids of every page of the search, in order, following ``next_after``."""
    seen: list[str] = []
    after = query.pop("after", None)
    while True:
        page = book.search(TaskQuery(after=after, **query))
        seen += ids(page)
        if page.next_after is None:
            return seen
        after = page.next_after


BY_RUNTIME_DESC = ["d", "c", "a", "f", "b", "e"]
"""Runtime descending; ties by id descending (the index's member order, reversed)."""


@pytest.mark.parametrize("sort", ["-runtime", "runtime:desc"])
@pytest.mark.parametrize("limit", [1, 2, 4, 50])
def test_sorted_by_runtime_over_every_page(book: RedisBook, sort: str, limit: int) -> None:
    fill_runtimes(book)
    # Tasks without a runtime come last, newest first (by creation, in the sort's direction).
    assert every_page(book, sort=sort, limit=limit) == [*BY_RUNTIME_DESC, "r1", "q2", "q1"]
    ascending = every_page(book, sort="runtime", limit=limit)
    assert ascending == ["e", "b", "f", "a", "c", "d", "q1", "q2", "r1"]


@pytest.mark.parametrize("limit", [1, 2, 3, 50])
def test_sorted_by_name_over_every_page(book: RedisBook, limit: int) -> None:
    """Names in order, each name's tasks by creation, then the tasks without a name."""
    fill_runtimes(book)
    ascending = ["a", "b", "c", "d", "e", "f", "q1", "q2", "r1"]
    assert every_page(book, sort="name", limit=limit) == ascending
    descending = ["f", "e", "d", "c", "b", "a", "r1", "q2", "q1"]
    assert every_page(book, sort="name:desc", limit=limit) == descending
    assert every_page(book, sort="-name", name="shop.flaky", limit=limit) == ["b", "a"]
    assert every_page(book, sort="name", state="queued", limit=limit) == ["q1", "q2"]
    page = book.search(sort="name", limit=2)
    assert page.totals["succeeded"] == 6
    assert page.totals["queued"] == 2


def test_a_name_sorted_page_reads_a_bounded_number_of_names(
    book: RedisBook, monkeypatch: pytest.MonkeyPatch
) -> None:
    fill_runtimes(book)
    monkeypatch.setattr(name_sort, "NAMES_PER_PAGE", 1)
    page = book.search(sort="name", state="queued")  # no named task is queued
    assert (ids(page), page.scan_complete, page.next_after) == ([], False, "n:shop.flaky")
    assert every_page(book, sort="name", state="queued") == ["q1", "q2"]


def test_a_state_without_the_field_reads_its_own_index(
    book: RedisBook, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No queued task has a runtime: they all come last, read from the queued index
    (not by walking the runtime index past every finished task)."""
    fill_runtimes(book)
    monkeypatch.setattr(console, "SEARCH_SCAN_LIMIT", 2)
    page = book.search(sort="-runtime", state="queued")
    assert (ids(page), page.scan_complete, page.next_after) == (["q2", "q1"], True, None)
    first = book.search(sort="ended", state="running", limit=1)
    assert ids(first) == ["r1"]
    assert first.next_after is None
    assert every_page(book, sort="runtime", state="queued", limit=1) == ["q1", "q2"]


def test_a_rare_name_is_sorted_from_its_own_indexes(
    book: RedisBook, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four tasks of a name among 299 others: the page sorts the name's tasks itself
    rather than walking the runtime index past every other task."""
    specs, items = [], []
    for n in range(303):
        name, task_id = ("rare", f"rare-{n}") if n % 100 == 0 else ("bulk", f"bulk-{n}")
        specs.append(CreateSpec(task_id, T0 + n, HOUR, 1, info=PublishInfo(name=name)))
        items.append((task_id, {"type": "start", "atMs": T0, "worker": "w"}, None))
        ok = {"type": "succeed", "atMs": T0 + n * 10, "resultRef": "r", "resultHash": "h"}
        items.append((task_id, ok, None))
    book.create_many(specs)
    book.apply_many(items)
    monkeypatch.setattr(console, "SEARCH_SCAN_LIMIT", 20)
    page = book.search(sort="-runtime", name="rare")
    rare = ["rare-300", "rare-200", "rare-100", "rare-0"]
    assert (ids(page), page.scan_complete) == (rare, True)
    assert every_page(book, sort="runtime", name="rare", limit=1) == rare[::-1]


def test_a_sorted_page_keeps_the_filters_and_totals(book: RedisBook) -> None:
    fill_runtimes(book)
    page = book.search(sort="-runtime", name="shop.steady", limit=2)
    assert ids(page) == ["d", "c"]
    assert page.totals["succeeded"] == 4
    assert page.totals_exact
    assert every_page(book, sort="-runtime", state="running") == ["r1"]
    assert every_page(book, sort="runtime", state="queued") == ["q1", "q2"]
    assert every_page(book, sort="-runtime", worker="w", limit=3) == [*BY_RUNTIME_DESC, "r1"]
    by_start = every_page(book, sort="-started", limit=3)
    assert by_start == ["r1", "f", "e", "d", "c", "b", "a", "q2", "q1"]
    assert every_page(book, sort="attempts", q="shop.") == ["a", "b", "c", "d", "e", "f"]
    assert every_page(book, sort="-ended", limit=4)[:6] == ["f", "e", "d", "c", "b", "a"]


def test_a_page_continues_after_its_last_task_moved(book: RedisBook) -> None:
    """The cursor holds the last task's key and id: a task whose key changed since (a
    retry, here a later start) does not make the next page skip or repeat a task."""
    fill_runtimes(book)
    first = book.search(sort="started", limit=2)
    assert ids(first) == ["a", "b"]
    book.create(id="b2", now_ms=T0, ttl_ms=HOUR, max_attempts=1)
    book.apply("b2", {"type": "start", "atMs": T0 + 1000, "worker": "w"}, None)  # ties b
    book.client.zadd(book.keys.sort_index("started"), {"b": T0 + 99_000})  # b moved on
    rest = every_page(book, sort="started", limit=2, after=first.next_after)
    assert rest[:5] == ["b2", "c", "d", "e", "f"]
    # Descending, ties by id descending: r2 ties r1 and sorts before it (shown, in effect).
    latest = book.search(sort="-started", limit=2)
    assert ids(latest) == ["b", "r1"]
    book.create(id="r2", now_ms=T0, ttl_ms=HOUR, max_attempts=1)
    book.apply("r2", {"type": "start", "atMs": T0 + 9000, "worker": "w"}, None)
    book.client.zadd(book.keys.sort_index("started"), {"r1": T0 + 100_000})
    rest = every_page(book, sort="-started", limit=2, after=latest.next_after)
    assert rest == ["f", "e", "d", "c", "b2", "a", "q2", "q1"]


def test_one_search_box_finds_ids_names_and_text(book: RedisBook) -> None:
    fill(book)  # gen-*, talk-*; gen-2 failed with a ValueError
    fill_runtimes(book)
    by_name = book.search(q="FLAKY")
    assert ids(by_name) == ["b", "a"]
    assert by_name.matched == {"id": 0, "name": 2, "text": 0}
    assert [row.matched_by for row in by_name.tasks] == ["name", "name"]
    assert ids(book.search(q="talk-")) == ["talk-2", "talk-1", "talk-0"]  # ids, as ever
    by_text = book.search(q="valueerror")
    assert ids(by_text) == ["gen-2"]
    assert by_text.matched == {"id": 0, "name": 0, "text": 1}
    assert by_text.scan_complete
    assert ids(book.search(q="(4,)")) == ["gen-4"]  # args


def test_a_text_search_is_bounded_and_says_so(
    book: RedisBook, monkeypatch: pytest.MonkeyPatch
) -> None:
    fill(book)
    monkeypatch.setattr(console, "SEARCH_SCAN_LIMIT", 6)  # 3 entries a walk
    page: SearchPage = book.search(q="(")  # every gen and talk task's args
    assert page.scanned == 3
    assert not page.scan_complete
    assert not page.totals_exact
    assert page.next_after is not None
    found = every_page(book, q="(", limit=2)
    assert found == ["talk-2", "talk-1", "talk-0"] + [f"gen-{i}" for i in range(5, -1, -1)]


@pytest.mark.parametrize("sort", ["random", "-", "runtime:up", "name:up", "", "--runtime"])
def test_a_bad_sort_names_the_field_and_what_it_accepts(book: RedisBook, sort: str) -> None:
    with pytest.raises(AsyncBookError) as raised:
        book.search(sort=sort)
    assert raised.value.field == "sort"
    assert "runtime" in raised.value.message


@pytest.mark.parametrize("after", ["12", "x:", ":a", "nan:a", "~x", "1e999:a", "n:", "nx:a"])
@pytest.mark.parametrize("sort", ["-runtime", "name"])
def test_a_sorted_search_refuses_a_cursor_it_did_not_give(
    book: RedisBook, sort: str, after: str
) -> None:
    with pytest.raises(AsyncBookError) as raised:
        book.search(sort=sort, after=after)
    assert raised.value.field == "after"
