"""The documentation's Python snippets: the README's and every docs page's, in page order.

Tests that run one snippet pick it by a marker it contains (``snippet('Celery("proj"')``).
"""

from __future__ import annotations

import re
from pathlib import Path

from . import ROOT

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
