"""The status page in headless Chromium (Debian's package), driven by Playwright."""

from __future__ import annotations

import os
import random
import re
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import parse_qs, quote, urlsplit

import pytest
from playwright import sync_api

from asyncbook import (
    MemoryBook,
    ProgressEvent,
    PublishInfo,
    RedisBook,
    StartEvent,
    SucceedEvent,
    sweep,
)
from asyncbook.celery import RedisBroker
from asyncbook.web import BackgroundServer

from ..support.broker import CONSUMED_SENT, PREFETCHED, busy_broker
from ..support.celery import CELERY_URL, unique
from ..support.retries import ended_task, kept_message
from ..support.web_server import WEB_REDIS_URL, Running, running_server

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

DOCS = Path(__file__).resolve().parents[2] / "docs"
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


# -- the operator console: search, filters, the task's info, workers, stats -----------------------

SCREENSHOTS = DOCS / "screenshots"
MINUTE_MS = 60_000
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "app/tasks.py", line 41, in render\n'
    "    image = decode(blob)\n"
    "ValueError: not a JPEG file"
)


class Seeded(NamedTuple):
    """One task the console tests create: its id, name, worker, outcome and runtime."""

    id: str
    name: str
    worker: str | None
    outcome: str
    minutes_ago: int
    runtime_ms: int | None = None


PARENT = "ingest/album-7"
GROUP = "thumbnails/album-7"
SEEDED = (
    Seeded(PARENT, "album.ingest", "celery@cpu-1", "succeeded", 45, 2_600),
    Seeded("thumbnail/photo-01.jpg", "thumbnail.render", "celery@gpu-1", "succeeded", 40, 1_800),
    Seeded("thumbnail/photo-02.jpg", "thumbnail.render", "celery@gpu-1", "succeeded", 31, 2_400),
    Seeded("thumbnail/photo-03.jpg", "thumbnail.render", "celery@gpu-2", "failed", 22, 700),
    Seeded("thumbnail/photo-04.jpg", "thumbnail.render", "celery@gpu-2", "running", 3),
    Seeded("video/intro.mp4", "video.transcode", "celery@gpu-1", "succeeded", 35, 48_000),
    Seeded("video/keynote.mp4", "video.transcode", "celery@gpu-2", "running", 6),
    Seeded("video/outro.mp4", "video.transcode", None, "queued", 2),
    Seeded("mail/welcome-1042", "mail.send", "celery@cpu-1", "succeeded", 15, 120),
    Seeded("mail/welcome-1043", "mail.send", "celery@cpu-1", "failed", 9, 90),
    Seeded("mail/digest-77", "mail.send", None, "queued", 1),
)


def seed_console(book: RedisBook) -> None:
    """The tasks of ``SEEDED``, with their info, run through their events in the past hour:
    the thumbnails are children of ``PARENT`` and members of ``GROUP``."""
    now = book.now_ms()
    for task in sorted(SEEDED, key=lambda seeded: -seeded.minutes_ago):  # in creation order
        created = now - task.minutes_ago * MINUTE_MS
        thumbnail = task.name == "thumbnail.render"
        info = PublishInfo(
            name=task.name,
            args=repr((task.id.rsplit("/", 1)[-1],)),
            kwargs=repr({"size": 256, "quality": "high"} if thumbnail else {"priority": 5}),
            queue="gpu" if task.worker and "gpu" in task.worker else "default",
            parent_id=PARENT if thumbnail else None,
            root_id=PARENT if thumbnail else None,
        )
        book.create(
            id=task.id,
            now_ms=created,
            ttl_ms=3 * 3_600_000,
            max_attempts=3,
            group_id=GROUP if thumbnail else None,
            info=info,
        )
        if task.worker is None:
            continue
        started = created + 5_000
        book.apply(task.id, {"type": "start", "atMs": started, "worker": task.worker})
        ended = started + (task.runtime_ms or 0)
        if task.outcome == "running":
            book.apply(task.id, ProgressEvent(at_ms=started + 1, progress=35, cursor="c35"))
        elif task.outcome == "succeeded":
            book.apply(task.id, SucceedEvent(at_ms=ended, result_ref="s3://out", result_hash="h"))
        else:
            failure = {
                "type": "fail",
                "atMs": ended,
                "error": "not a JPEG file",
                "retryable": False,
                "exception": "ValueError",
                "traceback": TRACEBACK,
            }
            book.apply(task.id, failure)


def seed_traffic(book: RedisBook, count: int) -> None:
    """``count`` more runs spread over the past hour (thumbnails fast, videos slow, a few
    failing): charts with something to show."""
    rng = random.Random(12)
    now = book.now_ms()
    for n in range(count):
        video = n % 4 == 0
        name = "video.transcode" if video else "thumbnail.render"
        task_id = f"traffic/{name}-{n:04d}"
        started = now - (count - n) * 3_300_000 // count
        book.create(
            id=task_id,
            now_ms=started - 1_000,
            ttl_ms=3 * 3_600_000,
            max_attempts=1,
            info=PublishInfo(name=name, queue="gpu"),
        )
        book.apply(task_id, StartEvent(at_ms=started, worker=f"celery@gpu-{n % 2 + 1}"))
        runtime = int(rng.lognormvariate(10.3 if video else 6.8, 0.6))
        runtime = min(runtime, now - started - 1_000)  # every run ended before now
        if rng.random() < (0.15 if video else 0.06):
            failure = {"type": "fail", "atMs": started + runtime, "error": "x", "retryable": False}
            book.apply(task_id, failure)
        else:
            done = SucceedEvent(at_ms=started + runtime, result_ref="s3://out", result_hash="h")
            book.apply(task_id, done)


def shoot(page: Any, tmp_path: Path, name: str) -> None:
    """A full-page screenshot, copied to docs/screenshots/ when refreshing the docs."""
    path = tmp_path / name
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 1000
    if UPDATE_DOCS:
        SCREENSHOTS.mkdir(exist_ok=True)
        shutil.copyfile(path, SCREENSHOTS / name)


def shown_ids(page: Any) -> list[str]:
    ids = page.eval_on_selector_all("#tasks tr", "rows => rows.map(r => r.dataset.taskId)")
    return [str(task_id) for task_id in ids]


def wait_rows(page: Any, expected: list[str] | set[str]) -> None:
    """Wait until the list shows exactly ``expected`` (in that order when it is a list)."""
    script = """(expected) => {
      const ids = [...document.querySelectorAll('#tasks tr')].map(r => r.dataset.taskId);
      return Array.isArray(expected.ids) && expected.ordered
        ? JSON.stringify(ids) === JSON.stringify(expected.ids)
        : ids.length === expected.ids.length && expected.ids.every(id => ids.includes(id));
    }"""
    ids = sorted(expected) if isinstance(expected, set) else expected
    arg = {"ids": ids, "ordered": isinstance(expected, list)}
    page.wait_for_function(script, arg=arg, timeout=5_000)


def query_of(page: Any) -> dict[str, list[str]]:
    return parse_qs(urlsplit(page.url).query)


def ids_where(**match: str | None) -> set[str]:
    return {
        task.id
        for task in SEEDED
        if all(getattr(task, field) == value for field, value in match.items())
    }


def test_console_list_searches_filters_and_sorts(
    server: Running, page: Any, tmp_path: Path
) -> None:
    """Search by id prefix, a name, a state chip: each lands in the URL, back and forward
    restore it, the rows match; columns sort; the list stays live; it fits a phone."""
    book = server.book
    seed_console(book)
    every = {task.id for task in SEEDED}
    page.set_viewport_size({"width": 1200, "height": 760})
    page.goto(server.url + "/")
    wait_rows(page, every)
    page.wait_for_function("document.getElementById('status').textContent === 'live'")
    # The columns: name, id, state, progress, worker, started, runtime, attempts.
    row = 'tr[data-task-id="video/intro.mp4"]'
    assert page.inner_text(f"{row} .name") == "video.transcode"
    assert page.inner_text(f"{row} .worker") == "celery@gpu-1"
    assert page.inner_text(f"{row} .runtime") == "48 s"
    assert page.inner_text(f"{row} .attempts") == "1 / 3"
    assert page.get_attribute(f"{row} .started time", "datetime")
    running = 'tr[data-task-id="video/keynote.mp4"]'
    assert page.get_attribute(f"{running} .bar", "aria-valuenow") == "35"
    assert page.inner_text(f"{running} .percent") == "35%"
    assert page.get_attribute('#totals [data-chip="succeeded"]', "data-count") == "5"
    assert page.get_attribute('#totals [data-chip=""]', "data-count") == str(len(SEEDED))
    assert page.get_attribute('th[data-sort="created"]', "aria-sort") == "descending"
    newest_first = [task.id for task in sorted(SEEDED, key=lambda t: t.minutes_ago)]
    assert shown_ids(page) == newest_first
    shoot(page, tmp_path, "list.png")

    # An id prefix, typed: the URL says so; back returns to the whole list.
    page.fill("#q", "video/")
    page.wait_for_url(lambda url: "q=video%2F" in url)
    wait_rows(page, {task.id for task in SEEDED if task.id.startswith("video/")})
    page.go_back()
    wait_rows(page, every)
    assert page.input_value("#q") == ""
    page.go_forward()
    wait_rows(page, {task.id for task in SEEDED if task.id.startswith("video/")})
    assert page.input_value("#q") == "video/"
    page.goto(server.url + "/")
    wait_rows(page, every)

    # A name from the book's names, then a state chip: both filters in the URL.
    page.wait_for_selector('#name option[value="thumbnail.render"]', state="attached")
    page.select_option("#name", "thumbnail.render")
    page.wait_for_url(lambda url: "name=thumbnail.render" in url)
    thumbnails = ids_where(name="thumbnail.render")
    wait_rows(page, thumbnails)
    assert page.get_attribute('#totals [data-chip="failed"]', "data-count") == "1"
    page.click('#totals [data-chip="failed"]')
    page.wait_for_url(lambda url: "state=failed" in url)
    assert query_of(page) == {"name": ["thumbnail.render"], "state": ["failed"]}
    wait_rows(page, ids_where(name="thumbnail.render", outcome="failed"))
    assert page.get_attribute('#totals [data-chip="failed"]', "aria-pressed") == "true"
    assert page.input_value("#state") == "failed"
    # A shared link opens the same view.
    other = page.context.browser.new_page()
    other.goto(page.url)
    wait_rows(other, ids_where(name="thumbnail.render", outcome="failed"))
    assert other.input_value("#name") == "thumbnail.render"
    assert other.input_value("#state") == "failed"
    other.close()
    page.go_back()
    page.wait_for_url(lambda url: "state=" not in url and "name=thumbnail.render" in url)
    wait_rows(page, thumbnails)
    assert page.input_value("#state") == ""

    # Sorting: runtime, longest first, the unfinished last; a second press flips it.
    page.click('th[data-sort="runtime"] button')
    by_runtime = [
        "thumbnail/photo-02.jpg",
        "thumbnail/photo-01.jpg",
        "thumbnail/photo-03.jpg",
        "thumbnail/photo-04.jpg",
    ]
    wait_rows(page, by_runtime)
    assert page.get_attribute('th[data-sort="runtime"]', "aria-sort") == "descending"
    assert page.get_attribute('th[data-sort="created"]', "aria-sort") is None
    assert query_of(page)["sort"] == ["-runtime"]
    page.click('th[data-sort="runtime"] button')
    wait_rows(page, [*by_runtime[2::-1], by_runtime[3]])
    assert page.get_attribute('th[data-sort="runtime"]', "aria-sort") == "ascending"
    # Oldest first is the API's own order.
    page.click('th[data-sort="created"] button')
    page.wait_for_url(lambda url: "sort=" not in url)
    wait_rows(
        page, [t.id for t in sorted(SEEDED, key=lambda t: t.minutes_ago) if t.id in thumbnails]
    )
    page.click('th[data-sort="created"] button')
    page.wait_for_url(lambda url: "sort=oldest" in url)
    oldest = [t.id for t in sorted(SEEDED, key=lambda t: -t.minutes_ago) if t.id in thumbnails]
    wait_rows(page, oldest)

    # Live: a task moving and a new one created reach the page without a reload.
    page.goto(server.url + "/")
    wait_rows(page, every)
    page.wait_for_function("document.getElementById('status').textContent === 'live'")
    event = ProgressEvent(at_ms=book.now_ms(), progress=80, cursor="c80")
    book.apply("video/keynote.mp4", event)
    page.wait_for_selector(f'{running} .bar[data-progress="80"]', timeout=5_000)
    info = PublishInfo(name="mail.send", args="('welcome-1044',)", queue="default")
    book.create(
        id="mail/welcome-1044", now_ms=book.now_ms(), ttl_ms=3_600_000, max_attempts=1, info=info
    )
    wait_rows(page, every | {"mail/welcome-1044"})
    page.wait_for_selector('#totals [data-chip="queued"][data-count="3"]', timeout=5_000)

    # A bad value in a hand-edited link: the page names the field and marks its control.
    page.goto(server.url + "/?since=yesterday")
    page.wait_for_selector("#message:has-text('since must be')", timeout=5_000)
    assert page.get_attribute("#since", "aria-invalid") is not None
    page.goto(server.url + "/")
    wait_rows(page, every | {"mail/welcome-1044"})

    # On a phone: the rows become cards, nothing wider than the screen.
    page.set_viewport_size({"width": 390, "height": 844})
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    shoot(page, tmp_path, "list-phone.png")


def test_console_task_page_shows_info_family_and_traceback(
    server: Running, page: Any, tmp_path: Path
) -> None:
    book = server.book
    seed_console(book)
    failed = "thumbnail/photo-03.jpg"
    page.set_viewport_size({"width": 1100, "height": 760})
    page.goto(server.url + "/task?id=" + quote(failed, safe=""))
    page.wait_for_selector('#summary[data-state="failed"]', timeout=5_000)
    page.wait_for_selector("#info-section:not([hidden])", timeout=5_000)
    info = page.inner_text("#info")
    for text in ("thumbnail.render", "gpu", "celery@gpu-2", "700 ms", "Started (UTC)"):
        assert text in info
    assert page.inner_text("#args") == "('photo-03.jpg',)"
    assert page.inner_text("#kwargs") == "{'size': 256, 'quality': 'high'}"
    page.wait_for_selector("#failure:not([hidden])")
    assert page.inner_text("#exception") == "ValueError"
    assert page.inner_text("#traceback") == TRACEBACK
    group_link = page.get_attribute("#relations a[href^='/groups/']", "href")
    assert group_link == "/groups/" + quote(GROUP, safe="")
    assert page.get_attribute("#relations a[href^='/task']", "href") == "/task?id=" + quote(
        PARENT, safe=""
    )
    assert page.locator("#history tr").count() == 2  # start, fail
    assert not page.is_visible("#cancel-open")  # it has ended
    shoot(page, tmp_path, "task.png")
    # The name links to the list of its kind; the parent lists its children.
    assert page.get_attribute("#task-name a", "href") == "/?name=thumbnail.render"
    page.click("#relations a[href^='/task']")
    page.wait_for_selector("#children", timeout=5_000)
    children = page.eval_on_selector_all("#children a", "links => links.map(a => a.textContent)")
    assert sorted(children) == sorted(ids_where(name="thumbnail.render"))
    assert page.inner_text("#title") == PARENT
    # Its group's page, from the link.
    page.goto(server.url + "/task?id=" + quote(failed, safe=""))
    page.click("#relations a[href^='/groups/']")
    page.wait_for_selector("#counts [data-chip='failed'][data-count='1']", timeout=5_000)


def test_console_cancel_from_the_task_page_updates_its_info(server: Running, page: Any) -> None:
    book = server.book
    seed_console(book)
    task_id = "video/keynote.mp4"
    page.goto(server.url + "/task?id=" + quote(task_id, safe=""))
    page.wait_for_selector('#summary[data-state="running"]', timeout=5_000)
    page.wait_for_selector("#info-section:not([hidden])", timeout=5_000)
    assert "Ended" not in page.inner_text("#info")
    page.click("#cancel-open")
    page.fill("#cancel-reason", "wrong source file")
    page.click("#cancel-confirm")
    page.wait_for_selector('#summary[data-state="cancelled"]', timeout=5_000)
    page.wait_for_selector("#action-status:has-text('Cancelled.')")
    page.wait_for_function("document.getElementById('info').textContent.includes('Ended')")
    task = book.get(task_id)
    assert task is not None
    assert task.state == "cancelled"
    assert task.error == "wrong source file"


def test_console_resend_from_the_task_page_links_both_ways(
    page: Any, tmp_path: Path, queue: str
) -> None:
    failed = "thumbnail/photo-07.jpg"
    name = "thumbnail.render"
    with running_server(broker_url=WEB_REDIS_URL) as server:
        book = server.book
        ended_task(book, failed, message=kept_message(name=name, queue=queue), name=name)
        ended_task(book, "kept-nothing", name=name)  # published without keep_messages
        page.set_viewport_size({"width": 1100, "height": 1000})  # the page fits: one backdrop
        page.goto(server.url + "/task?id=" + quote(failed, safe=""))
        page.wait_for_selector('#summary[data-state="failed"]', timeout=5_000)
        page.wait_for_selector("#resend-open:not([hidden])", timeout=5_000)
        assert not page.is_visible("#cancel-open")
        page.click("#resend-open")
        assert page.is_visible("#resend-dialog")
        assert page.evaluate("document.activeElement.id") == "resend-reason"
        assert not page.is_visible("#resend-token")  # a server without a token needs none
        page.fill("#resend-reason", "the CDN is back")
        shoot(page, tmp_path, "retry.png")
        page.click("#resend-confirm")
        page.wait_for_selector("#action-status:has-text('Resent as')", timeout=5_000)
        new_id = page.inner_text("#action-status a")
        info = book.info(failed)
        assert info is not None
        assert info.retried_as == new_id
        page.wait_for_selector("#relations:has-text('Resent as')", timeout=5_000)
        assert not page.is_visible("#resend-open")  # resent once
        # The new task's page links back, and says who asked and why.
        page.click("#action-status a")
        page.wait_for_selector('#summary[data-state="queued"]', timeout=5_000)
        page.wait_for_selector("#relations:has-text('Resent from')", timeout=5_000)
        assert page.inner_text("#title") == new_id
        assert "the CDN is back" in page.inner_text("#info")
        assert page.get_attribute("#relations a", "href") == "/task?id=" + quote(failed, safe="")
        # Nothing kept, no button.
        page.goto(server.url + "/task?id=kept-nothing")
        page.wait_for_selector('#summary[data-state="failed"]', timeout=5_000)
        page.wait_for_selector("#info-section:not([hidden])", timeout=5_000)
        assert not page.is_visible("#resend-open")


def test_console_workers_page(server: Running, page: Any, tmp_path: Path) -> None:
    book = server.book
    seed_console(book)
    page.set_viewport_size({"width": 1100, "height": 600})
    page.goto(server.url + "/workers")
    expected = book.workers(3_600_000)
    assert {worker.name for worker in expected} == {
        "celery@cpu-1",
        "celery@gpu-1",
        "celery@gpu-2",
    }
    page.wait_for_function(
        "(n) => document.querySelectorAll('#workers tr').length === n", arg=len(expected)
    )
    page.wait_for_function("document.getElementById('status').textContent === 'live'")
    shown = page.eval_on_selector_all("#workers tr", "rows => rows.map(r => r.dataset.worker)")
    assert shown == [worker.name for worker in expected]  # most recently seen first
    for worker in expected:
        row = f'#workers tr[data-worker="{worker.name}"]'
        counts = [page.inner_text(f"{row} .{key}") for key in ("started", "succeeded", "failed")]
        assert counts == [str(worker.started), str(worker.succeeded), str(worker.failed)]
        links = page.eval_on_selector_all(f"{row} .running a", "a => a.map(l => l.textContent)")
        assert links == list(worker.running)
        assert "ago" in page.inner_text(f"{row} .seen")
    gpu_2 = '#workers tr[data-worker="celery@gpu-2"]'
    assert sorted(
        page.eval_on_selector_all(f"{gpu_2} .running a", "a => a.map(l => l.textContent)")
    ) == sorted(ids_where(worker="celery@gpu-2", outcome="running"))
    assert "3 workers, 2 running." in page.inner_text("#found")
    shoot(page, tmp_path, "workers.png")
    # A task that starts elsewhere shows up live.
    book.apply(
        "video/outro.mp4", {"type": "start", "atMs": book.now_ms(), "worker": "celery@gpu-3"}
    )
    page.wait_for_selector('#workers tr[data-worker="celery@gpu-3"] .running a', timeout=5_000)
    # A worker's name opens the task list filtered by it.
    page.click('#workers tr[data-worker="celery@gpu-1"] th a')
    page.wait_for_url(lambda url: "worker=celery%40gpu-1" in url)
    wait_rows(page, ids_where(worker="celery@gpu-1"))
    assert page.input_value("#worker") == "celery@gpu-1"


def test_console_stats_page_draws_its_charts(server: Running, page: Any, tmp_path: Path) -> None:
    book = server.book
    seed_console(book)
    seed_traffic(book, 240)
    page.set_viewport_size({"width": 1100, "height": 800})
    page.goto(server.url + "/stats")
    page.wait_for_selector("#throughput svg rect.segment", timeout=5_000)
    stats = book.stats(window_ms=3_600_000)
    ended = sum(stats.totals[state] for state in ("succeeded", "failed", "expired", "cancelled"))
    # Throughput: one stacked segment per state per minute with ends; their sum is the ends.
    values = page.eval_on_selector_all(
        "#throughput rect.segment", "rects => rects.map(r => Number(r.dataset.value))"
    )
    assert sum(values) == ended == 7 + 240
    series = set(
        page.eval_on_selector_all("#throughput rect.segment", "r => r.map(x => x.dataset.series)")
    )
    assert series == {"succeeded", "failed"}
    assert page.get_attribute("#throughput svg", "role") == "img"
    assert "Throughput" in (page.text_content("#throughput svg > title") or "")
    assert page.get_attribute("#throughput path.series-started", "d")
    # Runtime percentiles and failure rate: lines with data, described in words.
    for key in ("p50", "p95", "p99"):
        assert page.get_attribute(f"#runtime path.series-{key}", "d")
    assert page.locator("#failure-rate circle.point").count() >= 1
    assert f"{stats.totals['started']} started" in page.inner_text("#throughput-summary")
    assert "p50" in page.inner_text("#runtime-summary")
    failed = stats.totals["failed"]
    assert f"({failed} failed of {ended} ended)" in page.inner_text("#failure-summary")
    started = page.inner_text('#totals [data-total="started"] td')
    assert started == str(stats.totals["started"])
    shoot(page, tmp_path, "stats.png")
    # One name, a wider window: both in the URL, the charts drawn again for them.
    page.wait_for_selector('#name option[value="mail.send"]', state="attached")
    page.select_option("#name", "mail.send")
    page.wait_for_url(lambda url: "name=mail.send" in url)
    page.wait_for_selector('#totals [data-total="failed"] td:text-is("1")', timeout=5_000)
    page.select_option("#window", "6h")
    page.wait_for_url(lambda url: "window=6h" in url)
    assert query_of(page) == {"name": ["mail.send"], "window": ["6h"]}
    page.wait_for_function(
        "document.querySelector('#throughput svg title').textContent.includes('5 minutes')"
    )
    values = page.eval_on_selector_all(
        "#throughput rect.segment", "rects => rects.map(r => Number(r.dataset.value))"
    )
    assert sum(values) == 2
    assert page.get_attribute("#tasks-link", "href") == "/?name=mail.send&since=6h"
    page.go_back()
    page.wait_for_function("document.getElementById('window').value === '1h'")
    assert query_of(page) == {"name": ["mail.send"]}
    # On a phone the charts shrink to fit.
    page.set_viewport_size({"width": 390, "height": 844})
    page.wait_for_function("document.querySelector('#throughput svg').getAttribute('width') <= 390")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390


def test_list_page_over_a_book_without_task_info_filters_by_state(page: Any) -> None:
    """A MemoryBook keeps no info: no search API, so the list falls back to the seed's
    listing and its state filter, and says so."""
    book = MemoryBook()
    for n in range(3):
        book.create(id=f"job-{n}", now_ms=NOW + n, ttl_ms=10_000_000, max_attempts=2)
    book.apply("job-1", StartEvent(at_ms=NOW + 10, worker="w"))
    with BackgroundServer(book) as server:
        page.goto(server.url.rstrip("/") + "/")
        wait_rows(page, {"job-0", "job-1", "job-2"})
        assert "filters by state only" in page.inner_text("#found")
        assert not page.is_visible("#q")
        assert not page.is_visible("#totals")
        assert page.inner_text("#message") == ""
        page.select_option("#state", "running")
        page.wait_for_url(lambda url: url.endswith("/?state=running"))
        wait_rows(page, ["job-1"])
        page.goto("about:blank")  # its change stream closes before the server stops


def test_the_page_shows_a_banner_while_the_sweep_stopped(
    server: Running, page: Any, tmp_path: Path
) -> None:
    book = server.book
    now = book.now_ms()
    book.create(id="overdue-1", now_ms=now - 90_000, ttl_ms=1_000, max_attempts=1)
    book.create(id="overdue-2", now_ms=now - 60_000, ttl_ms=1_000, max_attempts=1)
    book.record_sweep(now - 75_000)
    page.goto(server.url + "/")
    page.wait_for_selector("#health-banner:not([hidden])", timeout=10_000)
    text = page.inner_text("#health-banner")
    assert "2 task(s) are past their deadline" in text
    # 75 s when the page reads the health at once; a second or two later on a busy machine.
    assert re.search(r"the last sweep ran 7[5-7] s ago", text), text
    assert page.get_attribute("#health-banner", "role") == "alert"
    page.wait_for_selector('tr[data-task-id="overdue-1"]')
    shoot(page, tmp_path, "health-banner.png")
    sweep(book)  # the sweep runs again: the banner goes at the next check (every 5 s)
    page.wait_for_selector("#health-banner", state="hidden", timeout=10_000)


def test_the_list_page_downloads_its_search_as_csv(server: Running, page: Any) -> None:
    """The "Download CSV" link follows the filters and sort in the URL, and downloads
    the rows the list shows; a book without task info has no link."""
    seed_console(server.book)
    page.goto(server.url + "/?name=thumbnail.render&sort=oldest")
    thumbnails = ids_where(name="thumbnail.render")
    wait_rows(page, thumbnails)
    link = "#download-csv"
    href = page.get_attribute(link, "href")
    assert href == "/api/search.csv?name=thumbnail.render&sort=oldest"
    assert page.get_attribute(link, "download") is not None
    with page.expect_download() as download:
        page.click(link)
    text = Path(download.value.path()).read_text()
    ids = [line.split(",", 1)[0] for line in text.splitlines()[1:]]
    assert ids == sorted(
        thumbnails, key=lambda i: -next(t for t in SEEDED if t.id == i).minutes_ago
    )
    page.select_option("#state", "failed")
    page.wait_for_url(lambda url: "state=failed" in url)
    wait_rows(page, ids_where(name="thumbnail.render", outcome="failed"))
    href = page.get_attribute(link, "href") or ""
    assert href.startswith("/api/search.csv?")
    assert parse_qs(urlsplit(href).query) == {
        "name": ["thumbnail.render"],
        "state": ["failed"],
        "sort": ["oldest"],
    }
    book = MemoryBook()
    book.create(id="job", now_ms=NOW, ttl_ms=10_000_000, max_attempts=1)
    with BackgroundServer(book) as plain:
        page.goto(plain.url.rstrip("/") + "/")
        wait_rows(page, {"job"})
        assert not page.is_visible(link)
        page.goto("about:blank")


def test_queues_page_shows_the_brokers_queues_and_asyncbooks_own(page: Any, tmp_path: Path) -> None:
    own = unique("asyncbook")
    broker = RedisBroker(CELERY_URL)
    with (
        running_server(broker=broker, own_queue=own) as server,
        busy_broker(server.book, own) as busy,
    ):
        page.set_viewport_size({"width": 1100, "height": 600})
        page.goto(server.url + "/queues")
        row = f'#queues tr[data-queue="{busy.consumed}"]'
        page.wait_for_selector(row)
        cells = {key: page.inner_text(f"{row} .{key}") for key in ("ready", "unacked")}
        assert cells == {"ready": str(CONSUMED_SENT - PREFETCHED), "unacked": str(PREFETCHED)}
        prioritized = f'#queues tr[data-queue="{busy.prioritized}"]'
        assert page.inner_text(f"{prioritized} .priorities") == "0: 1, 3: 1, 9: 2"
        oldest = page.get_attribute(f"{row} .oldest a", "href")
        assert oldest == f"/task?id={busy.consumed_ids[PREFETCHED]}"
        assert "asyncbook" in page.inner_text(f'#queues tr[data-queue="{own}"] th')
        assert page.inner_text('#own dd[data-term="Queue"]') == own
        assert page.inner_text('#own dd[data-term="Overdue tasks"]') == "0"
        assert "(redis)" in page.inner_text("#broker")
        assert "waiting" in page.inner_text("#found")
        assert page.get_attribute("#found", "aria-live") == "polite"
        assert page.get_attribute('header nav a[href="/queues"]', "aria-current") == "page"
        shoot(page, tmp_path, "queues.png")
        # Read again every few seconds: a message sent now shows up without a reload.
        broker.client.lpush(busy.prioritized, b"{}")
        page.wait_for_function(
            "([selector, n]) => document.querySelector(selector).textContent === n",
            arg=[f"{prioritized} .ready", "5"],
            timeout=10_000,
        )
        # On a phone the table turns into blocks: nothing is wider than the screen.
        page.set_viewport_size({"width": 390, "height": 800})
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390
        page.goto("about:blank")
    broker.close()


def test_queues_page_without_a_broker_says_so(server: Running, page: Any) -> None:
    page.goto(server.url + "/queues")
    page.wait_for_selector('#own dd[data-term="Queue"]')
    assert "No broker configured" in page.inner_text("#broker")
    assert page.inner_text('#own dd[data-term="Queue"]') == "asyncbook"
    assert page.locator("#queues tr").count() == 0
    assert page.inner_text("#message") == ""


# -- who may do what: roles on the page, the audit trail -------------------------------------


def test_task_page_lists_its_audit_and_hides_cancel_from_readers(page: Any, tmp_path: Path) -> None:
    from asyncbook.web import AccessRules

    operator, reader = "operator-token-0123456789", "reader-token-0123456789ab"
    with running_server(access=AccessRules.of(token=operator, read_token=reader)) as server:
        book = server.book
        seed_console(book)
        task_id = "video/keynote.mp4"
        url = server.url + "/task?id=" + quote(task_id, safe="")
        page.set_viewport_size({"width": 1000, "height": 640})
        page.goto(url)
        page.fill('input[name="token"]', reader)
        page.click('button[type="submit"]')
        page.wait_for_selector('#summary[data-state="running"]', timeout=5_000)
        assert not page.is_visible("#cancel-open")  # a reader may not cancel
        assert not page.is_visible("#audit-section")  # nothing changed by hand yet
        page.click("#signout button")
        page.wait_for_url(server.url + "/login")
        page.goto(url)
        page.fill('input[name="token"]', operator)
        page.click('button[type="submit"]')
        page.wait_for_selector('#summary[data-state="running"]', timeout=5_000)
        page.click("#cancel-open")
        page.fill("#cancel-reason", "wrong source file")
        page.fill("#cancel-token", operator)
        page.click("#cancel-confirm")
        page.wait_for_selector("#action-status:has-text('Cancelled.')")
        row = '#audit tr[data-actor="token:operator"]'
        page.wait_for_selector(row, timeout=5_000)
        assert "wrong source file" in page.inner_text(row)
        assert "cancelled" in page.inner_text(row)
        page.wait_for_selector("#info-section:not([hidden])", timeout=5_000)
        shoot(page, tmp_path, "audit.png")
        (entry,) = book.audit(task_id)
        assert (entry.actor, entry.reason, entry.outcome) == (
            "token:operator",
            "wrong source file",
            "cancelled",
        )


def test_resend_from_the_page_is_audited_and_hidden_from_readers(
    page: Any, tmp_path: Path, queue: str
) -> None:
    from asyncbook.web import AccessRules

    operator, reader = "operator-token-0123456789", "reader-token-0123456789ab"
    failed = "thumbnail/photo-07.jpg"
    access = AccessRules.of(token=operator, read_token=reader)
    with running_server(access=access, broker_url=WEB_REDIS_URL) as server:
        book = server.book
        name = "thumbnail.render"
        ended_task(book, failed, message=kept_message(name=name, queue=queue), name=name)
        url = server.url + "/task?id=" + quote(failed, safe="")
        page.set_viewport_size({"width": 1000, "height": 900})
        page.goto(url)
        page.fill('input[name="token"]', reader)
        page.click('button[type="submit"]')
        page.wait_for_selector('#summary[data-state="failed"]', timeout=5_000)
        page.wait_for_selector("#info-section:not([hidden])", timeout=5_000)
        assert page.get_attribute("body", "data-role") == "read"
        assert not page.is_visible("#resend-open")  # a reader may not resend
        page.click("#signout button")
        page.wait_for_url(server.url + "/login")
        page.goto(url)
        page.fill('input[name="token"]', operator)
        page.click('button[type="submit"]')
        page.wait_for_selector("#resend-open:not([hidden])", timeout=5_000)
        page.click("#resend-open")
        page.fill("#resend-reason", "the CDN is back")
        page.click("#resend-confirm")  # the cookie is no change's: the dialog asks for the token
        page.wait_for_selector("#resend-token", state="visible", timeout=5_000)
        page.fill("#resend-token", operator)
        page.click("#resend-confirm")
        page.wait_for_selector("#action-status:has-text('Resent as')", timeout=5_000)
        new_id = page.inner_text("#action-status a")
        row = '#audit tr[data-actor="token:operator"]'
        page.wait_for_selector(row, timeout=5_000)
        shown = page.inner_text(row)
        assert "resend" in shown
        assert "the CDN is back" in shown
        assert f"retried as {new_id}" in shown
        assert page.get_attribute(f"{row} a", "href") == "/task?id=" + quote(new_id, safe="")
        shoot(page, tmp_path, "retry-audit.png")
        (entry,) = book.audit(failed)
        assert (entry.actor, entry.reason, entry.retried_as) == (
            "token:operator",
            "the CDN is back",
            new_id,
        )
