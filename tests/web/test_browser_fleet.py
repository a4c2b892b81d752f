"""The workers page with the workers' records (issue 34): online ones first, each with
its state, pool and queues; a worker shut down offline; one that keeps no record without
a state. In headless Chromium (test_browser's machinery)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from asyncbook import WorkerRecord

from ..support.web_server import Running
from .test_browser import page, seed_console, shoot

__all__ = ["page"]

pytestmark = pytest.mark.redis


def test_workers_page_shows_who_is_online_with_pool_and_queues(
    server: Running, page: Any, tmp_path: Path
) -> None:
    book = server.book
    seed_console(book)
    book.announce_worker(
        WorkerRecord(
            name="celery@gpu-1",
            host="gpu-1",
            pid=4242,
            pool="prefork",
            concurrency=4,
            prefetch=4,
            queues=("video",),
            load=(0.42, 0.4, 0.3),
        )
    )
    book.retire_worker(
        WorkerRecord(
            name="celery@cpu-1",
            host="cpu-1",
            pid=77,
            pool="threads",
            concurrency=8,
            queues=("celery", "mail"),
        )
    )
    page.goto(server.url + "/workers")
    page.wait_for_function("document.querySelectorAll('#workers tr').length === 3")
    page.wait_for_function("document.getElementById('status').textContent === 'live'")
    shown = page.eval_on_selector_all("#workers tr", "rows => rows.map(r => r.dataset.worker)")
    assert shown[0] == "celery@gpu-1"  # online first
    gpu = '#workers tr[data-worker="celery@gpu-1"]'
    cpu = '#workers tr[data-worker="celery@cpu-1"]'
    other = '#workers tr[data-worker="celery@gpu-2"]'
    assert page.inner_text(f"{gpu} .state") == "online"
    assert page.inner_text(f"{gpu} .pool") == "prefork \u00d74, prefetch 4"
    assert page.inner_text(f"{gpu} .queues") == "video"
    assert page.inner_text(f"{cpu} .state") == "offline"
    assert page.inner_text(f"{cpu} .queues") == "celery, mail"
    assert page.inner_text(f"{other} .state") == "\u2013"  # seen in its tasks only
    assert "1 online" in page.inner_text("#found")
    shoot(page, tmp_path, "workers-online.png")
