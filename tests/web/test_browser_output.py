"""The task page shows the task's output live, each attempt apart (Chromium)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from asyncbook import FailEvent, RedisBook, StartEvent, SucceedEvent

from ..support.web_server import Running
from .test_browser import page, shoot

__all__ = ["page"]  # the fixture, shared with test_browser

pytestmark = pytest.mark.redis

WORDS = [
    "The",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "the",
    "lazy",
    "dog",
    "while",
    "the",
    "model",
    "keeps",
    "writing",
]


def generate(book: RedisBook, task_id: str, go: threading.Event, now: int) -> None:
    """Two attempts writing tokens: the first fails halfway and is retried."""
    go.wait(10)
    book.apply(task_id, StartEvent(at_ms=now + 100, worker="celery@gpu-1"))
    for word in WORDS[:5]:
        book.append_output(task_id, word + " ")
        time.sleep(0.03)
    book.append_output(task_id, "\nCUDA out of memory: retrying\n")
    book.apply(task_id, FailEvent(at_ms=now + 1500, error="CUDA out of memory", retryable=True))
    book.apply(task_id, StartEvent(at_ms=now + 1600, worker="celery@gpu-2"))
    for word in WORDS:
        book.append_output(task_id, word + " ")
        time.sleep(0.03)
    book.apply(
        task_id, SucceedEvent(at_ms=now + 4200, result_ref="s3://story.txt", result_hash="h")
    )


def test_the_task_page_shows_its_output_live(server: Running, page: Any, tmp_path: Path) -> None:
    book = server.book
    now = book.now_ms()
    book.record_sweep(now)  # a recent sweep: no banner on the page
    book.create(id="story-7", now_ms=now, ttl_ms=600_000, max_attempts=2)
    go = threading.Event()
    writer = threading.Thread(target=generate, args=(book, "story-7", go, now))
    writer.start()
    try:
        page.goto(server.url + "/task?id=story-7")
        page.wait_for_selector('#summary[data-version="0"]')
        assert page.is_hidden("#output-section")  # nothing written yet
        go.set()
        page.wait_for_selector("#output-section:not([hidden])")
        total = 5 + 1 + len(WORDS)
        page.wait_for_function(f"document.getElementById('output-count').textContent === '{total}'")
        page.wait_for_selector('#summary[data-state="succeeded"]', timeout=10_000)
        shoot(page, tmp_path, "task-output.png")
    finally:
        go.set()
        writer.join()
    text = page.inner_text("#output")
    assert text.startswith("attempt 1\nThe quick brown fox jumps \nCUDA out of memory")
    assert "attempt 2\n" + " ".join(WORDS) in text
    assert page.locator("#output .output-attempt").count() == 2
