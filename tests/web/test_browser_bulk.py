"""The list page's bulk resend form (a search's failed tasks sent again), in headless
Chromium (test_browser's machinery)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from asyncbook.web import AccessRules

from ..support.retries import ended_task, kept_message, sent
from ..support.web_server import WEB_REDIS_URL, running_server
from .test_browser import page, seed_console, shoot

__all__ = ["page"]

pytestmark = pytest.mark.redis

OPERATOR, READER = "operator-token-0123456789", "reader-token-0123456789ab"
NAME = "thumbnail.render"
KEPT = ["thumbnail/photo-07.jpg", "thumbnail/photo-08.jpg", "thumbnail/photo-09.jpg"]
"""Failed tasks of ``NAME`` published with their message kept; seed_console adds
thumbnail/photo-03.jpg, failed with none (refused: ``no-message``)."""


def sign_in(page: Any, url: str, token: str) -> None:
    page.goto(url)
    page.fill('input[name="token"]', token)
    page.click('button[type="submit"]')
    page.wait_for_selector('#totals [data-chip="failed"]', timeout=5_000)


def test_the_list_retries_its_searchs_failed_tasks_in_one_form(
    page: Any, tmp_path: Path, queue: str
) -> None:
    access = AccessRules.of(token=OPERATOR, read_token=READER)
    with running_server(access=access, broker_url=WEB_REDIS_URL) as server:
        book = server.book
        seed_console(book)
        for task_id in KEPT:
            ended_task(book, task_id, message=kept_message(name=NAME, queue=queue), name=NAME)
        other = "mail/welcome-1044"  # failed, kept, but another name: not the search's
        mail = kept_message(name="mail.send", queue=queue)
        ended_task(book, other, message=mail, name="mail.send")
        url = server.url + "/?name=" + NAME
        page.set_viewport_size({"width": 1100, "height": 900})
        sign_in(page, url, READER)
        assert page.get_attribute("body", "data-role") == "read"
        assert not page.is_visible("#bulk-open")  # a reader may not resend
        page.click("#signout button")
        page.wait_for_url(server.url + "/login")
        sign_in(page, url, OPERATOR)
        page.wait_for_selector("#bulk-open:not([hidden])", timeout=5_000)
        page.wait_for_selector("#bulk:not([hidden])", timeout=5_000)
        assert page.inner_text("#bulk-open") == "Resend these failed tasks…"
        page.click("#bulk-open")
        assert page.evaluate("document.activeElement.id") == "bulk-reason"
        assert page.inner_text("#bulk-heading") == "Resend these 4 failed tasks?"
        assert f"(name {NAME})" in page.inner_text("#bulk-help")
        page.fill("#bulk-reason", "the GPU driver is fixed")
        page.click("#bulk-confirm")  # the sign-in cookie is no change's: it asks for the token
        page.wait_for_selector("#bulk-token", state="visible", timeout=5_000)
        assert not page.is_visible("#bulk-summary")  # nothing was sent
        page.fill("#bulk-token", OPERATOR)
        page.click("#bulk-confirm")
        page.wait_for_selector("#bulk-summary[data-retried]", timeout=10_000)
        summary = page.inner_text("#bulk-summary")
        assert "Sent again: 3 tasks." in summary
        assert "Refused: 1 task." in summary
        assert page.inner_text('#bulk-summary [data-code="no-message"]').startswith("no-message: 1")
        new_ids = page.eval_on_selector_all(
            "#bulk-new a[data-new-task]", "links => links.map(a => a.dataset.newTask)"
        )
        assert len(new_ids) == 3
        assert not page.is_visible("#bulk-confirm")  # done: only "Close" is left
        shoot(page, tmp_path, "retry-bulk.png")
        for task_id in KEPT:
            info = book.info(task_id)
            assert info is not None
            assert info.retried_as in new_ids
            made = book.info(str(info.retried_as))
            assert made is not None
            assert made.retry_of == task_id
            assert made.retry_reason == "the GPU driver is fixed"
        other_info = book.info(other)
        assert other_info is not None
        assert other_info.retried_as is None
        assert len(sent(queue)) == 3
        page.click("#bulk-keep")
        assert not page.is_visible("#bulk-dialog")
        for new_id in new_ids:  # the list read again: the new tasks, queued
            page.wait_for_selector(f'#tasks tr[data-task-id="{new_id}"]', timeout=5_000)


def test_the_bulk_form_says_in_its_dialog_that_the_server_has_no_broker(page: Any) -> None:
    with running_server() as server:  # no broker: a resend answers 503
        ended_task(
            server.book, "thumbnail/photo-07.jpg", message=kept_message(name=NAME), name=NAME
        )
        page.goto(server.url + "/?state=failed")
        page.wait_for_selector("#bulk:not([hidden])", timeout=5_000)
        page.click("#bulk-open")
        page.click("#bulk-confirm")
        page.wait_for_selector("#bulk-error:not(:empty)", timeout=5_000)
        assert "broker" in page.inner_text("#bulk-error")
        assert page.is_visible("#bulk-dialog")
        assert not page.is_visible("#bulk-summary")  # nothing was sent
        info = server.book.info("thumbnail/photo-07.jpg")
        assert info is not None
        assert info.retried_as is None
