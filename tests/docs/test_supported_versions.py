"""The Celery and kombu versions pyproject.toml admits are the ones the docs promise (the
README and docs/install.md).

``.ci/celery-matrix`` runs the Celery layer's tests on each supported minor; this file checks
the declared ranges (fast, no install) so a too-tight or too-loose pin fails here first.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
# The latest patch of each supported minor, as the registry serves them (kombu 5.6's last is
# 5.6.2), and the first of the next major, which the ranges must refuse.
SUPPORTED = {
    "celery": ("5.5.0", "5.5.3", "5.6.3", "5.7.0"),
    "kombu": ("5.5.0", "5.5.4", "5.6.2", "5.7.0"),
}
REFUSED = ("5.4.0", "6.0.0")


def extra(name: str = "celery") -> dict[str, Requirement]:
    with (ROOT / "pyproject.toml").open("rb") as file:
        extras = tomllib.load(file)["project"]["optional-dependencies"]
    requirements = (Requirement(text) for text in extras[name])
    return {requirement.name: requirement for requirement in requirements}


@pytest.mark.parametrize("name", sorted(SUPPORTED))
def test_the_celery_extra_admits_each_supported_minor(name: str) -> None:
    specifier = extra()[name].specifier
    assert [v for v in SUPPORTED[name] if v not in specifier] == []
    assert [v for v in REFUSED if v in specifier] == []


@pytest.mark.parametrize("name", sorted(SUPPORTED))
def test_the_celery_extra_brings_the_redis_transport_dependencies(name: str) -> None:
    # kombu's Redis transport imports redis-py and packaging, which only kombu's redis
    # extra installs (kombu 5.7): without it a worker on a Redis broker fails at start-up.
    assert "redis" in extra()[name].extras


def test_the_all_extra_names_kombus_range_itself() -> None:
    # Nested in asyncbook[celery,web,cli] alone, pip meets the range too late for a user's
    # `celery[redis]==5.5.*` and backtracks kombu[redis] down to releases it cannot build.
    assert str(extra("all")["kombu"]) == str(extra()["kombu"])


@pytest.mark.parametrize("page", ["README.md", "docs/install.md"])
def test_the_docs_state_the_supported_matrix(page: str) -> None:
    text = (ROOT / page).read_text(encoding="utf-8")
    section = text.split("## Supported versions", 1)[1].split("\n## ", 1)[0]
    rows = ("| Python | 3.11+ |", "| Celery | 5.5\N{EN DASH}5.7 ", "| kombu | 5.5\N{EN DASH}5.7,")
    assert [row for row in rows if row not in section] == []
    assert "| servers | Redis 7.0+" in section
