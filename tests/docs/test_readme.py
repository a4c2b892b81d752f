"""Every Python snippet of the documentation runs as written: the README's and those of
every page under docs/ (the site mkdocs builds from them).

Snippets that talk to Redis run inside ``snippets_db()`` (one at a time on the machine,
their keys removed after each).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ..support import ROOT
from ..support.celery import quick_memory_transport, shared_tasks_kept
from ..support.snippets import README, SNIPPETS, snippets_db
from ..support.tracing import fresh_tracer_provider


@pytest.fixture
def readme_namespaces() -> Iterator[None]:
    with snippets_db():
        yield


def _snippet_id(index: int) -> str:
    page, _ = SNIPPETS[index]
    number = [p for p, _ in SNIPPETS[: index + 1]].count(page) - 1
    return f"{page.relative_to(ROOT).as_posix()}-block{number}"


@pytest.fixture
def quick_memory_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    """The snippets' in-process workers on ``memory://`` stop at once (else 2 to 4 s each)."""
    quick_memory_transport(monkeypatch)


@pytest.fixture
def own_shared_tasks() -> Iterator[None]:
    """The snippets' tasks (shared, Celery's default) are not added to a later test's app."""
    with shared_tasks_kept():
        yield


@pytest.fixture
def own_tracer_provider() -> Iterator[None]:
    """A snippet sets the tracer provider as an app does (once per process)."""
    fresh_tracer_provider()
    yield
    fresh_tracer_provider()


@pytest.mark.usefixtures(
    "readme_namespaces", "quick_memory_broker", "own_shared_tasks", "own_tracer_provider"
)
@pytest.mark.parametrize(
    ("page", "source"), SNIPPETS, ids=[_snippet_id(i) for i in range(len(SNIPPETS))]
)
def test_documentation_snippet_runs(page: Path, source: str) -> None:
    exec(compile(source, str(page), "exec"), {"__name__": "readme"})


def test_the_snippets_moved_with_the_text() -> None:
    # The README held 21 Python blocks before the docs site; each moved to a page (and the
    # README gained its quickstart): none may be lost on the way.
    assert len(SNIPPETS) >= 22
    assert sum(page == README for page, _ in SNIPPETS) >= 1
