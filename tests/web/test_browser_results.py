"""The task page's result (a result stored by reference): small JSON inline with a
download link, a large or binary one as a link only, read under the read role; in
headless Chromium (test_browser's machinery). Its screenshot: docs/screenshots/."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from asyncbook import RedisBook, StartEvent, SucceedEvent
from asyncbook.artifacts import ArtifactStore, S3Store, digest_of, key_for
from asyncbook.web import AccessRules

from ..support.s3 import S3Server, s3_server
from ..support.web_server import running_server
from .test_browser import page, shoot

__all__ = ["page"]

pytestmark = pytest.mark.redis

OPERATOR, READER = "operator-token-0123456789", "reader-token-0123456789ab"
HOUR_MS = 3_600_000


def succeeded(book: RedisBook, task_id: str, store: ArtifactStore, data: bytes) -> None:
    digest = digest_of(data)
    ref = store.put(key_for(book.namespace, task_id, digest), data, "application/octet-stream")
    now = book.now_ms()
    book.create(id=task_id, now_ms=now - 95_000, ttl_ms=HOUR_MS, max_attempts=1)
    book.apply(task_id, StartEvent(at_ms=now - 90_000, worker="celery@gpu-1"))
    book.apply(task_id, SucceedEvent(at_ms=now, result_ref=ref, result_hash=digest))


def sign_in(page: Any, url: str, token: str) -> None:
    page.goto(url)
    page.fill('input[name="token"]', token)
    page.click('button[type="submit"]')


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with s3_server(tmp_path_factory.mktemp("s3") / "moto.log") as server:
        yield server


def test_the_task_page_shows_a_small_result_and_links_a_large_one(
    page: Any, tmp_path: Path, s3: S3Server
) -> None:
    store = S3Store(f"s3://{s3.bucket()}/results", s3.options)
    access = AccessRules.of(token=OPERATOR, read_token=READER)
    with running_server(access=access, artifacts=store) as server:
        transcript = {
            "language": "en",
            "segments": [
                {"start": 0.0, "end": 4.2, "text": "Welcome to the quarterly review."},
                {"start": 4.2, "end": 9.8, "text": "Revenue grew eleven percent."},
            ],
        }
        succeeded(server.book, "transcribe/call-0412", store, json.dumps(transcript).encode())
        audio = bytes(range(256)) * 1024  # 256 KiB of binary
        succeeded(server.book, "tts/episode-9", store, audio)
        page.set_viewport_size({"width": 1100, "height": 900})
        sign_in(page, server.url + "/task?id=transcribe%2Fcall-0412", READER)
        page.wait_for_selector("#result-inline:not([hidden])", timeout=10_000)
        assert json.loads(page.inner_text("#result-inline")) == transcript
        assert page.is_visible("#result-download")
        shoot(page, tmp_path, "task-result.png")
        # The link downloads through the server, with the reader's session.
        href = page.get_attribute("#result-download", "href")
        assert href is not None
        cookies = {c["name"]: c["value"] for c in page.context.cookies()}
        got = httpx.get(server.url + href, cookies=cookies)
        assert got.status_code == 200
        assert json.loads(got.content) == transcript
        page.goto(server.url + "/task?id=tts%2Fepisode-9")
        page.wait_for_selector("#result-section:not([hidden])", timeout=10_000)
        assert page.is_hidden("#result-inline")
        assert page.is_visible("#result-download")
        assert f"{len(audio)} bytes, application/octet-stream" in page.inner_text("#result-note")
