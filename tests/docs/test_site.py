"""The documentation site builds (``mkdocs build --strict``) and its front page reads in a
real browser (Debian's Chromium, headless): the title, the navigation to every section, the
search box, and a page reached from the front page's table.

``ASYNCBOOK_UPDATE_SCREENSHOTS=1`` copies the front page's screenshot to
docs/screenshots/site.png (a test run leaves the tree as it is).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from playwright import sync_api

from ..support import ROOT

CHROMIUM = "/usr/bin/chromium"
BROWSER_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]

if not Path(CHROMIUM).exists() and os.environ.get("CI") != "true":
    pytest.skip(f"{CHROMIUM} is not installed (.ci/run installs it)", allow_module_level=True)


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The site, built strict into a temporary directory and served on a loopback port."""
    built = tmp_path_factory.mktemp("site")
    mkdocs = [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet"]
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [*mkdocs, "--site-dir", str(built)], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    handler = functools.partial(_Quiet, directory=str(built))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_the_front_page_reads_in_a_browser(site: str, tmp_path: Path) -> None:
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(site)
            assert page.title() == "asyncbook"
            assert page.inner_text("article h1").rstrip("¶") == "asyncbook"
            nav = page.inner_text("nav.md-nav--primary")
            for section in ("Getting started", "The book", "Celery", "Operating", "Reference"):
                assert section in nav
            assert page.locator("input.md-search__input").count() == 1
            path = tmp_path / "site.png"
            page.screenshot(path=str(path))
            assert path.stat().st_size > 10_000
            if os.environ.get("ASYNCBOOK_UPDATE_SCREENSHOTS") == "1":
                shutil.copyfile(path, ROOT / "docs" / "screenshots" / "site.png")
            page.click("article a[href='quickstart/']")
            page.wait_for_url(site + "quickstart/")
            assert page.inner_text("article h1").rstrip("¶") == "Production quickstart"
            assert 'Celery("proj"' in page.inner_text("article")
            assert errors == []
        finally:
            browser.close()
