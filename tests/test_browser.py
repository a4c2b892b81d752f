"""The status page in headless Chromium (Debian's package), driven by Playwright."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright import sync_api

from asyncbook import ProgressEvent, RedisBook, StartEvent, SucceedEvent

from .web_server import Running, running_server

pytestmark = pytest.mark.redis

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
]
NOW = 1_000_000

if not Path(CHROMIUM).exists() and os.environ.get("CI") != "true":
    pytest.skip(f"{CHROMIUM} is not installed (.ci/run installs it)", allow_module_level=True)


@pytest.fixture
def server() -> Iterator[Running]:
    with running_server() as running:
        yield running


@pytest.fixture
def page() -> Iterator[Any]:
    assert shutil.which(CHROMIUM) or Path(CHROMIUM).exists()
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser.new_page(viewport={"width": 1100, "height": 600})
        finally:
            browser.close()


def drive(book: RedisBook, task_id: str, started: threading.Event) -> None:
    """Run a task slowly enough to watch: start, ten progress steps, succeed."""
    started.wait(10)
    book.apply(task_id, StartEvent(at_ms=NOW + 1, worker="worker-a"))
    for step in range(1, 11):
        time.sleep(0.15)
        book.apply(task_id, ProgressEvent(at_ms=NOW + 1 + step, progress=step * 10, cursor="c"))
    time.sleep(0.15)
    book.apply(task_id, SucceedEvent(at_ms=NOW + 50, result_ref="s3://out.png", result_hash="h"))


def bar_values(page: Any, selector: str) -> list[int]:
    """Sample a bar's aria value until it stops changing or reaches 100."""
    values: list[int] = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        value = int(page.get_attribute(selector, "aria-valuenow") or "0")
        if not values or values[-1] != value:
            values.append(value)
        if value == 100:
            break
        time.sleep(0.05)
    return values


def test_list_page_shows_a_running_task_reach_100_and_succeed(
    server: Running, page: Any, tmp_path: Path
) -> None:
    book = server.book
    book.create(id="older", now_ms=NOW, ttl_ms=10_000_000, max_attempts=1)
    book.create(id="render 42/ü", now_ms=NOW, ttl_ms=10_000_000, max_attempts=1)
    started = threading.Event()
    worker = threading.Thread(target=drive, args=(book, "render 42/ü", started))
    worker.start()
    try:
        page.goto(server.url + "/")
        row = 'tr[data-task-id="render 42/ü"]'
        page.wait_for_selector(row)
        page.wait_for_function("document.getElementById('status').textContent === 'live'")
        started.set()
        values = bar_values(page, f"{row} .bar")
        page.wait_for_selector(f'{row} [data-state="succeeded"]', timeout=10_000)
        page.screenshot(path=str(tmp_path / "tasks.png"), full_page=True)
    finally:
        started.set()
        worker.join()
    assert values[-1] == 100
    assert len(values) >= 3, values  # seen moving, not just jumping to the end
    assert values == sorted(values)
    assert (tmp_path / "tasks.png").stat().st_size > 1000
    page.select_option("#state", "queued")
    page.wait_for_function("document.querySelectorAll('#tasks tr').length === 1")
    assert page.get_attribute("#tasks tr", "data-task-id") == "older"


def test_task_page_streams_history_and_state(server: Running, page: Any, tmp_path: Path) -> None:
    book = server.book
    book.create(id="a/b%c", now_ms=NOW, ttl_ms=10_000_000, max_attempts=1)
    started = threading.Event()
    worker = threading.Thread(target=drive, args=(book, "a/b%c", started))
    worker.start()
    try:
        page.goto(server.url + "/task?id=a%2Fb%25c")
        page.wait_for_selector('#summary[data-version="0"]')
        started.set()
        values = bar_values(page, "#summary .bar")
        page.wait_for_selector('#summary[data-state="succeeded"]', timeout=10_000)
        page.wait_for_function("document.getElementById('status').textContent === 'finished'")
        page.screenshot(path=str(tmp_path / "task.png"), full_page=True)
    finally:
        started.set()
        worker.join()
    assert values[-1] == 100
    rows = page.locator("#history tr")
    assert rows.count() == 12
    assert page.inner_text("#title") == "a/b%c"
    assert "s3://out.png" in page.inner_text("#summary")


def test_task_page_shows_a_deadline_past_the_dates_a_browser_holds(
    server: Running, page: Any
) -> None:
    """9e15 ms is past JavaScript's last Date (8.64e15): the page shows the number."""
    far = 9 * 10**15
    server.book.create(id="far", now_ms=NOW, ttl_ms=far - NOW, max_attempts=1)
    page.goto(server.url + "/task?id=far")
    page.wait_for_selector('#summary[data-version="0"]', timeout=5_000)
    assert f"{far} ms" in page.inner_text("#summary")
    assert page.inner_text("#title") == "far"


@pytest.mark.parametrize("task_id", ["..", "."])
def test_task_page_reaches_dot_ids(server: Running, page: Any, task_id: str) -> None:
    server.book.create(id=task_id, now_ms=NOW, ttl_ms=10_000_000, max_attempts=3)
    page.goto(server.url + "/task?id=" + task_id)
    page.wait_for_selector('#summary[data-version="0"]', timeout=5_000)
    assert "0 / 3" in page.inner_text("#summary")


def test_sign_in_returns_to_the_task_and_sign_out_ends_it(page: Any) -> None:
    token = "browser-token-0123456789"
    with running_server(token=token) as server:
        server.book.create(id="a/b", now_ms=NOW, ttl_ms=10_000_000, max_attempts=1)
        page.goto(server.url + "/task?id=a%2Fb")
        assert page.url.startswith(server.url + "/login?next=")
        page.fill('input[name="token"]', "not-the-token-0123")
        page.click('button[type="submit"]')
        page.wait_for_selector("text=That token is not valid.")
        page.fill('input[name="token"]', token)
        page.click('button[type="submit"]')
        page.wait_for_selector('#summary[data-version="0"]', timeout=5_000)
        assert page.url == server.url + "/task?id=a%2Fb"
        assert page.inner_text("#title") == "a/b"
        page.click("#signout button")
        page.wait_for_url(server.url + "/login")
        page.goto(server.url + "/")
        assert page.url == server.url + "/login"


# -- cancel ------------------------------------------------------------------------------------

DOCS = Path(__file__).resolve().parent.parent / "docs"
UPDATE_DOCS = os.environ.get("ASYNCBOOK_UPDATE_SCREENSHOTS") == "1"
"""Set to 1 to refresh the screenshots under docs/ (a test run leaves the tree as it is)."""


def keep_running(book: RedisBook, task_id: str, stop: threading.Event) -> None:
    """Start the task and report progress every 0.2 s until it is no longer running."""
    now = book.now_ms()
    book.apply(task_id, StartEvent(at_ms=now, worker="celery@gpu-1"))
    progress = 0
    while not stop.is_set() and progress < 90:
        stop.wait(0.2)
        progress += 5
        event = ProgressEvent(at_ms=book.now_ms(), progress=progress, cursor=f"chunk-{progress}")
        if not book.apply(task_id, event).changed:
            return  # cancelled: a worker stops at its next report


def running_task(book: RedisBook, task_id: str) -> tuple[threading.Thread, threading.Event]:
    book.create(id=task_id, now_ms=book.now_ms(), ttl_ms=3_600_000, max_attempts=2)
    stop = threading.Event()
    worker = threading.Thread(target=keep_running, args=(book, task_id, stop))
    worker.start()
    return worker, stop


def test_cancel_a_running_task_from_its_page(server: Running, page: Any, tmp_path: Path) -> None:
    book = server.book
    page.set_viewport_size({"width": 1000, "height": 640})
    worker, stop = running_task(book, "transcribe/interview-07.wav")
    try:
        page.goto(server.url + "/task?id=transcribe%2Finterview-07.wav")
        page.wait_for_selector('#summary[data-state="running"]', timeout=5_000)
        page.wait_for_function(
            "Number(document.querySelector('#summary .bar').dataset.progress) >= 10"
        )
        assert page.is_visible("#cancel-open")
        page.click("#cancel-open")
        assert page.is_visible("#cancel-dialog")
        assert page.evaluate("document.activeElement.id") == "cancel-reason"
        assert not page.is_visible("#cancel-token")  # a server without a token needs none
        page.fill("#cancel-reason", "customer withdrew the file")
        page.screenshot(path=str(tmp_path / "cancel-dialog.png"))
        page.click("#cancel-confirm")
        page.wait_for_selector('#summary[data-state="cancelled"]', timeout=5_000)
        page.wait_for_function("document.getElementById('status').textContent === 'finished'")
        page.wait_for_selector("#action-status:has-text('Cancelled.')")
        assert not page.is_visible("#cancel-open")
        assert not page.is_visible("#cancel-dialog")
        assert page.evaluate("document.activeElement.id") == "action-status"
        last = page.locator("#history tr").last
        assert "cancel" in last.inner_text()
        assert "customer withdrew the file" in page.inner_text("#summary")
        page.screenshot(path=str(tmp_path / "status-cancel.png"), full_page=True)
    finally:
        stop.set()
        worker.join()
    task = book.get("transcribe/interview-07.wav")
    assert task is not None
    assert task.state == "cancelled"
    assert task.error == "customer withdrew the file"
    assert (tmp_path / "status-cancel.png").stat().st_size > 1000
    if UPDATE_DOCS:
        shutil.copyfile(tmp_path / "status-cancel.png", DOCS / "status-cancel.png")
    # The list shows the cancelled state in a chip of its own colour, and filters by it.
    book.create(id="waiting", now_ms=book.now_ms(), ttl_ms=3_600_000, max_attempts=1)
    page.goto(server.url + "/")
    chip = '#tasks [data-state="cancelled"]'
    page.wait_for_selector(chip)
    colour = "(s) => getComputedStyle(document.querySelector(s)).backgroundColor"
    cancelled = page.evaluate(colour, chip)
    assert cancelled not in (page.evaluate(colour, '#tasks [data-state="queued"]'), "")
    page.select_option("#state", "cancelled")
    page.wait_for_function("document.querySelectorAll('#tasks tr').length === 1")
    assert page.get_attribute("#tasks tr", "data-task-id") == "transcribe/interview-07.wav"


def test_cancel_by_keyboard_with_the_token_the_page_asks_for(page: Any) -> None:
    token = "browser-token-0123456789"
    with running_server(token=token) as server:
        book = server.book
        worker, stop = running_task(book, "a/b")
        try:
            page.goto(server.url + "/task?id=a%2Fb")
            page.fill('input[name="token"]', token)
            page.click('button[type="submit"]')
            page.wait_for_selector('#summary[data-state="running"]', timeout=5_000)
            for _ in range(10):  # Tab along the page to the button, as a keyboard user does
                page.keyboard.press("Tab")
                if page.evaluate("document.activeElement.id") == "cancel-open":
                    break
            assert page.evaluate("document.activeElement.id") == "cancel-open"
            outline = "getComputedStyle(document.activeElement).outlineStyle"
            assert page.evaluate(outline) == "solid"  # focus is visible
            # Escape leaves it running, and focus goes back to the button.
            page.keyboard.press("Enter")
            assert page.is_visible("#cancel-dialog")
            page.keyboard.press("Escape")
            page.wait_for_selector("#cancel-dialog", state="hidden")
            page.wait_for_function("document.activeElement.id === 'cancel-open'")
            # The cookie opens the page, not a change: the dialog asks for the token.
            page.keyboard.press("Enter")
            assert page.is_visible("#cancel-token")
            page.keyboard.type("not needed")
            page.keyboard.press("Tab")
            page.keyboard.type("not-the-token-0123")
            page.keyboard.press("Enter")
            page.wait_for_selector("#cancel-error:has-text('That token is not valid.')")
            assert page.evaluate("document.activeElement.id") == "cancel-token"
            still = book.get("a/b")
            assert still is not None
            assert still.state == "running"
            page.fill("#cancel-token", token)
            page.keyboard.press("Enter")
            page.wait_for_selector('#summary[data-state="cancelled"]', timeout=5_000)
            page.wait_for_selector("#action-status:has-text('Cancelled.')")
            assert not page.is_visible("#cancel-open")
        finally:
            stop.set()
            worker.join()
        task = book.get("a/b")
        assert task is not None
        assert task.error == "not needed"


def test_a_finished_task_has_no_cancel_button(server: Running, page: Any) -> None:
    book = server.book
    now = book.now_ms()
    book.create(id="done", now_ms=now, ttl_ms=3_600_000, max_attempts=1)
    book.apply("done", StartEvent(at_ms=now, worker="w"))
    book.apply("done", SucceedEvent(at_ms=now + 1, result_ref="r", result_hash="h"))
    page.goto(server.url + "/task?id=done")
    page.wait_for_selector('#summary[data-state="succeeded"]', timeout=5_000)
    assert not page.is_visible("#cancel-open")
    book.create(id="queued", now_ms=now, ttl_ms=3_600_000, max_attempts=1)
    page.goto(server.url + "/task?id=queued")
    page.wait_for_selector('#summary[data-state="queued"]', timeout=5_000)
    assert page.is_visible("#cancel-open")


# -- groups ------------------------------------------------------------------------------------


def test_group_page_follows_its_members_live(server: Running, page: Any, tmp_path: Path) -> None:
    """Five running members move through the book: their bars, the overall bar and the
    state chips follow; each member links to its task page; the page fits a phone."""
    book = server.book
    group_id = "thumbnails/2024-06 ✓"
    ids = [f"thumbnail/photo-{n:02d}.jpg" for n in range(1, 6)]
    now = book.now_ms()
    for task_id in ids:
        book.create(id=task_id, now_ms=now, ttl_ms=3_600_000, max_attempts=2, group_id=group_id)
    book.seal_group(group_id, len(ids))
    for task_id in ids:
        book.apply(task_id, StartEvent(at_ms=book.now_ms(), worker="celery@gpu-1"))
    page.set_viewport_size({"width": 1000, "height": 720})
    page.goto(server.url + "/groups/thumbnails%2F2024-06%20%E2%9C%93")
    chip = "#counts [data-chip='{}'][data-count='{}']"
    page.wait_for_selector(chip.format("running", 5), timeout=5_000)
    page.wait_for_function("document.getElementById('status').textContent === 'live'")
    page.wait_for_function("document.querySelectorAll('#members li').length === 5")
    assert page.inner_text("#title") == group_id
    rows = [f'#members li[data-task-id="{task_id}"]' for task_id in ids]
    assert [page.get_attribute(row, "data-task-id") for row in rows] == ids  # creation order

    def progress_of(selector: str) -> float:
        return float(page.get_attribute(selector, "aria-valuenow") or "nan")

    def wait_overall(expected: float) -> None:
        script = "(p) => Number(document.getElementById('overall').dataset.progress) === p"
        page.wait_for_function(script, arg=expected, timeout=5_000)

    overall_seen = [progress_of("#overall")]
    for step in (20, 45):
        for task_id in ids:
            event = ProgressEvent(at_ms=book.now_ms(), progress=step, cursor=str(step))
            book.apply(task_id, event)
        wait_overall(step)
        overall_seen.append(progress_of("#overall"))
        for row in rows:
            page.wait_for_selector(f'{row} .bar[data-progress="{step}"]', timeout=5_000)
    assert overall_seen == [0, 20, 45]
    assert page.inner_text("#overall-percent") == "45%"
    # Two succeed, one fails for good, two go on at different speeds.
    for task_id in ids[:2]:
        book.apply(
            task_id, SucceedEvent(at_ms=book.now_ms(), result_ref="s3://t.jpg", result_hash="h")
        )
    failure = {"type": "fail", "atMs": book.now_ms(), "error": "corrupt", "retryable": False}
    book.apply(ids[2], failure)
    book.apply(ids[3], ProgressEvent(at_ms=book.now_ms(), progress=80, cursor="80"))
    book.apply(ids[4], ProgressEvent(at_ms=book.now_ms(), progress=60, cursor="60"))
    summary = book.group(group_id)
    assert summary is not None
    wait_overall(float(summary.progress))
    for state, count in (("running", 2), ("succeeded", 2), ("failed", 1), ("queued", 0)):
        page.wait_for_selector(chip.format(state, count), timeout=5_000)
    for row, state in zip(
        rows, ("succeeded", "succeeded", "failed", "running", "running"), strict=True
    ):
        page.wait_for_selector(f'{row} .member-state [data-state="{state}"]', timeout=5_000)
    page.wait_for_selector(f'{rows[3]} .bar[data-progress="80"]', timeout=5_000)
    assert progress_of(f"{rows[0]} .bar") == 100
    assert page.get_attribute(f"{rows[3]} .bar", "aria-label") == f"Progress of {ids[3]}"
    page.screenshot(path=str(tmp_path / "status-group.png"), full_page=True)
    assert (tmp_path / "status-group.png").stat().st_size > 1000
    if UPDATE_DOCS:
        shutil.copyfile(tmp_path / "status-group.png", DOCS / "status-group.png")
    # Keyboard: Tab reaches the members' links, in order.
    page.focus("header a")
    for _ in range(10):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.classList.contains('member-id')"):
            break
    assert page.evaluate("document.activeElement.textContent") == ids[0]
    assert page.evaluate("getComputedStyle(document.activeElement).outlineStyle") == "solid"
    # On a phone: nothing wider than the screen.
    page.set_viewport_size({"width": 390, "height": 800})
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    # The rest end: the stream says so, and the page says it once, politely.
    for task_id in ids[3:]:
        book.apply(
            task_id, SucceedEvent(at_ms=book.now_ms(), result_ref="s3://t.jpg", result_hash="h")
        )
    page.wait_for_function("document.getElementById('status').textContent === 'finished'")
    assert page.inner_text("#ended-note") == "Every member has ended: 4 succeeded, 1 failed."
    assert page.get_attribute("#ended-note", "aria-live") == "polite"
    assert page.inner_text("#ended") == "yes"
    # A member's link opens its task page.
    page.set_viewport_size({"width": 1000, "height": 720})
    page.click(f"{rows[2]} a")
    page.wait_for_selector('#summary[data-state="failed"]', timeout=5_000)
    assert page.inner_text("#title") == ids[2]


def test_group_page_of_an_unknown_group_says_so(server: Running, page: Any) -> None:
    page.goto(server.url + "/groups/no%2Fsuch")
    page.wait_for_selector("#message:has-text('No group')", timeout=5_000)
    assert page.inner_text("#message") == 'No group "no/such".'
    assert page.inner_text("#title") == "no/such"
