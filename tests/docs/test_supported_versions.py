"""The Celery and kombu versions pyproject.toml admits are the ones the docs promise (the
README and docs/install.md), and the kombu they name beside each Celery minor is the one
pip resolves (and ``.ci/celery-matrix`` tests).

``.ci/celery-matrix`` runs the Celery layer's tests on each supported minor; this file checks
the declared ranges (fast, no install) so a too-tight or too-loose pin fails here first.
"""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
import venv
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


KOMBU_BESIDE = {"5.5": "5.5", "5.6": "5.7", "5.7": "5.7"}
"""The kombu minor pip resolves for ``celery[redis]==<minor>.*`` and ``asyncbook[all]``."""


@pytest.mark.parametrize("page", ["README.md", "docs/install.md"])
def test_the_docs_name_the_kombu_pip_resolves_beside_each_celery(page: str) -> None:
    section = (ROOT / page).read_text(encoding="utf-8").split("## Supported versions", 1)[1]
    [row] = [line for line in section.splitlines() if line.startswith("| kombu |")]
    assert "the minor of your Celery" not in row  # Celery 5.6 gets kombu 5.7
    assert "5.5 with Celery 5.5, 5.7 with 5.6 and 5.7" in row


def test_the_matrix_tests_the_kombu_pip_resolves() -> None:
    matrix = (ROOT / ".ci/celery-matrix").read_text(encoding="utf-8")
    assert '"kombu[redis]==$minor.*"' not in matrix  # a pair pip never picks for Celery 5.6
    assert '"kombu[redis]==$kombu"' in matrix
    assert 'kombu=$(resolved_kombu "$venv/bin/python" "$minor"' in matrix


@pytest.mark.long
@pytest.mark.timeout(600)
@pytest.mark.parametrize("minor", sorted(KOMBU_BESIDE))
def test_pip_resolves_the_documented_kombu(minor: str, tmp_path: Path) -> None:
    """A dry run in an empty venv, from the registry: what a user's install picks."""
    venv.EnvBuilder(with_pip=True).create(tmp_path / "venv")
    report = tmp_path / "report.json"
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    done = subprocess.run(
        [str(tmp_path / "venv/bin/python"), "-m", "pip", "install", "--quiet", "--dry-run",
         "--ignore-installed", "--disable-pip-version-check", "--report", str(report),
         f"celery[redis]=={minor}.*", f"asyncbook[all] @ {ROOT.as_uri()}"],
        capture_output=True, text=True, timeout=500, check=False, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    versions = {
        item["metadata"]["name"]: item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    assert versions["celery"].startswith(f"{minor}.")
    assert versions["kombu"].startswith(f"{KOMBU_BESIDE[minor]}."), versions
