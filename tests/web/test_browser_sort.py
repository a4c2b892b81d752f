"""The list page sorted over every match on the server and its one search box, in
headless Chromium (test_browser's machinery)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from asyncbook import TaskQuery

from ..support.web_server import Running
from .test_browser import SEEDED, page, seed_console, seed_traffic, shoot, wait_rows

__all__ = ["page"]

pytestmark = pytest.mark.redis

TRAFFIC = 80
"""Runs besides ``SEEDED``: more than the page's 50 rows."""


def book_order(server: Running, **query: Any) -> list[str]:
    """Every id the book's search gives for ``query``, page after page."""
    seen: list[str] = []
    after = None
    while True:
        found = server.book.search(TaskQuery(after=after, limit=1000, **query))
        seen += [row.task.id for row in found.tasks]
        if found.next_after is None:
            return seen
        after = found.next_after


def test_list_sorts_by_runtime_over_every_page_and_finds_names(
    server: Running, page: Any, tmp_path: Path
) -> None:
    seed_console(server.book)
    seed_traffic(server.book, TRAFFIC)
    total = len(SEEDED) + TRAFFIC
    slowest = book_order(server, sort="-runtime")
    newest = book_order(server, sort="newest")
    assert set(slowest[:50]) != set(newest[:50])  # not a sort of the newest page alone
    page.set_viewport_size({"width": 1200, "height": 760})
    page.goto(server.url + "/")
    wait_rows(page, newest[:50])

    # A column header sorts every match on the server; "more" continues in that order.
    page.click('th[data-sort="runtime"] button')
    page.wait_for_url(lambda url: "sort=-runtime" in url)
    wait_rows(page, slowest[:50])
    assert page.get_attribute('th[data-sort="runtime"]', "aria-sort") == "descending"
    assert page.get_attribute('th[data-sort="created"]', "aria-sort") is None
    page.click("#more")
    wait_rows(page, slowest[:total])
    assert page.is_hidden("#more")
    assert "tasks without one last" in page.inner_text("#found")
    page.click('th[data-sort="runtime"] button')
    page.wait_for_url(lambda url: "sort=runtime" in url)
    wait_rows(page, book_order(server, sort="runtime")[:50])
    assert page.get_attribute('th[data-sort="runtime"]', "aria-sort") == "ascending"
    shoot(page, tmp_path, "list-sorted.png")

    # The search box finds a name (any case) as well as an id prefix.
    assert page.get_attribute("#q", "placeholder") == "id prefix, name, or text in args and errors"
    page.goto(server.url + "/")
    page.fill("#q", "Transcode")
    page.wait_for_url(lambda url: "q=Transcode" in url)
    videos = book_order(server, q="Transcode")
    assert len(videos) == 3 + TRAFFIC // 4
    wait_rows(page, videos[:50])
    shoot(page, tmp_path, "list-search.png")


def test_a_search_typed_before_the_names_arrive_is_kept(server: Running, page: Any) -> None:
    """The page selects the URL's name once the names arrive: before, it put the URL's whole
    view back in the fields, and a search typed meanwhile was lost (its URL never came)."""
    seed_console(server.book)
    held: list[Any] = []

    def hold(route: Any) -> None:
        held.append(route)

    page.route("**/api/names", hold)  # the names answer only when let through
    page.goto(server.url + "/")
    page.fill("#q", "Transcode")  # sent once the typing pauses (400 ms)
    while not held:
        page.wait_for_timeout(20)
    held[0].continue_()  # the names arrive while the typing pauses
    page.wait_for_url(lambda url: "q=Transcode" in url, timeout=10_000)
    assert page.input_value("#q") == "Transcode"
