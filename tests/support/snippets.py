"""The documentation's Python snippets: the README's and every docs page's, in page order.

Tests that run one snippet pick it by a marker it contains (``snippet('Celery("proj"')``).
Snippets that talk to Redis use the default URL (db 0) and namespaces named ``readme-…``:
a test runs them inside ``snippets_db()``.
"""

from __future__ import annotations

import fcntl
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from . import ROOT
from .books import delete_namespace

README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
"""The README and every page of the documentation site."""
INCLUDE = re.compile(r'^--8<-- "([^"]+)"$', re.M)
"""A line pymdownx.snippets replaces by a file of the checkout (mkdocs.yml)."""


def included(source: str) -> str:
    """``source`` with each ``--8<-- "path"`` line replaced by that file, as the site
    shows it."""
    return INCLUDE.sub(lambda m: (ROOT / m[1]).read_text(encoding="utf-8").rstrip("\n"), source)


SNIPPETS = [
    (page, included(source))
    for page in PAGES
    for source in re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S)
]
"""Every ``python`` block of every page, with its page, in page order."""


def snippet(marker: str, page: Path | None = None) -> tuple[str, Path]:
    """The one Python block (of ``page``, else of any page) that contains ``marker``, and
    the page it is on (for tracebacks that name the file)."""
    found = [(s, p) for p, s in SNIPPETS if marker in s and page in (None, p)]
    assert len(found) == 1, f"{len(found)} Python blocks contain {marker!r}"
    return found[0]


SNIPPETS_DB = "redis://127.0.0.1:6379/0"
"""Where the snippets' books and queues are, as the documentation writes it."""
SNIPPETS_LOCK = Path(tempfile.gettempdir()) / "asyncbook-doc-snippets.lock"


@contextmanager
def snippets_db() -> Iterator[redis.Redis]:
    """The snippets' db, held by this test alone and its ``readme-`` keys removed after.

    Every test process of every run on the machine shares that db, and the keys are
    removed by pattern: a file lock lets one test at a time use it.
    """
    with SNIPPETS_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        client = redis.Redis.from_url(SNIPPETS_DB)
        try:
            yield client
        finally:
            names = {key.decode().split("}")[0][1:] for key in client.scan_iter(match="{readme-*")}
            for namespace in names:
                delete_namespace(client, namespace)
            # The queues the snippets publish to (docs/queues.md), and kombu's bindings.
            for pattern in (
                "readme-*",
                "_kombu.binding.readme-*",
                "_kombu.binding_permanent.readme-*",
            ):
                for key in client.scan_iter(match=pattern):
                    client.delete(key)
            client.close()
