"""The canvas page (``/canvas/<id>``) and the task page's canvas, in headless Chromium
(test_browser's machinery): nodes by state, live progress, cancel of the open members,
and a canvas of 500 nodes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ..support.canvases import seed_canvas, seed_wide
from ..support.web_server import Running
from .test_browser import page, shoot

__all__ = ["page"]

pytestmark = pytest.mark.redis

NODE = "#canvas-graph g.node.task"


def test_the_canvas_page_draws_the_graph_live_and_cancels_its_open_members(
    server: Running, page: Any, tmp_path: Path
) -> None:
    book = server.book
    ids = seed_canvas(book, "render/")
    page.set_viewport_size({"width": 1000, "height": 560})
    page.goto(server.url + "/canvas/render%2Fcb")
    page.wait_for_selector(f'{NODE}[data-id="render/b"][data-state="running"]', timeout=5_000)
    assert page.inner_text("#title") == ids["root"]
    assert page.locator(NODE).count() == 7
    assert page.locator("#canvas-graph path.callback").count() == 1
    assert "3 open" in page.inner_text("#canvas-summary")
    # Live: the running member's bar follows its progress (the page reads again).
    book.apply(
        "render/b", {"type": "progress", "atMs": book.now_ms(), "progress": 90, "cursor": "9"}
    )
    bar = f'{NODE}[data-id="render/b"] rect.node-progress'
    page.wait_for_function(
        f"Number(document.querySelector('{bar}').getAttribute('width')) > 140", timeout=5_000
    )
    shoot(page, tmp_path, "canvas.png")
    page.click("#cancelall-open")
    page.fill("#cancelall-reason", "wrong input batch")
    page.click("#cancelall-confirm")
    page.wait_for_selector("#action-status:has-text('Cancelled 3')", timeout=5_000)
    page.wait_for_selector(f'{NODE}[data-id="render/cb"][data-state="cancelled"]')
    assert book.get("render/m2").state == "cancelled"  # type: ignore[union-attr]
    # The task page draws the canvas its task is part of, and links to its page.
    page.goto(server.url + "/task?id=render%2Fm1")
    page.wait_for_selector('#task-canvas g.node[data-id="render/m1"]', timeout=5_000)
    assert page.get_attribute("#canvas-link", "href") == "/canvas/render%2Fm1"
    shoot(page, tmp_path, "canvas-task.png")


def test_a_canvas_of_500_nodes_is_drawn(server: Running, page: Any, tmp_path: Path) -> None:
    root = seed_wide(server.book, "wide-", chain=20, spawned=24)  # 1 + 20 + 480 tasks
    page.set_viewport_size({"width": 1200, "height": 700})
    page.goto(server.url + "/canvas/" + root)
    page.wait_for_selector(NODE, timeout=10_000)
    assert page.locator(NODE).count() == 501
    assert "501 tasks" in page.inner_text("#canvas-summary")
    shoot(page, tmp_path, "canvas-500.png")
