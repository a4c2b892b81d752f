"""Each page's snippets run from the built wheel, with only what the page says to install.

The wheel is built from this checkout (its package files, without the checkout on the
path); each page's install (the first ``pip install`` it shows, with ``asyncbook[...]``
pointed at the wheel) goes into a fresh venv of its own, at the versions of
requirements/dev.lock (as constraints, so the venvs come from pip's cache); then every
Python block of the page runs there, one process each, in an empty directory. A page
that imports what its install does not bring fails here, never for a reader first.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import venv
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ..support import ROOT
from ..support.snippets import README, SNIPPETS, snippets_db

PAGES = [
    README,
    ROOT / "docs/quickstart.md",
    ROOT / "docs/celery.md",
    ROOT / "docs/resend.md",
    ROOT / "docs/lifecycle.md",
]
"""The pages whose snippets run from the wheel (each names its install)."""

INSTALL = re.compile(r"pip install ([^`\n#]+)")


def page_install(page: Path) -> list[str]:
    """The requirements of the first ``pip install`` the page shows."""
    found = INSTALL.search(page.read_text(encoding="utf-8"))
    assert found is not None, f"{page.name} names no install"
    return shlex.split(found[1])


def test_each_page_names_its_install() -> None:
    installs = {page.relative_to(ROOT).as_posix(): page_install(page) for page in PAGES}
    assert installs == {
        "README.md": ["asyncbook[all]"],
        "docs/quickstart.md": ["asyncbook[all]", "fastapi"],
        "docs/celery.md": ["asyncbook[demo]"],
        "docs/resend.md": ["asyncbook[demo]"],
        "docs/lifecycle.md": ["asyncbook[demo]"],
    }


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built (no isolation: the lock's setuptools) from a copy of the package's
    files, so that the checkout gains no build directory."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md", "CHANGELOG.md", "MANIFEST.in"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "asyncbook", source / "asyncbook", ignore=shutil.ignore_patterns("__pycache__")
    )
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(out), str(source)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout + built.stderr
    [found] = out.glob("asyncbook-*.whl")
    return found


@pytest.fixture(scope="module")
def constraints(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """requirements/dev.lock without its hashes: the versions, as pip constraints."""
    lines = (ROOT / "requirements/dev.lock").read_text(encoding="utf-8").splitlines()
    pins = [line.rstrip(" \\") for line in lines if line[:1].isalnum()]
    path = tmp_path_factory.mktemp("constraints") / "constraints.txt"
    path.write_text("\n".join(pins) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def snippet_namespaces() -> Iterator[None]:
    """The snippets' db held while they run, their keys removed after (``snippets_db``)."""
    with snippets_db():
        yield


def fresh_venv(folder: Path, requirements: list[str], wheel: Path, constraints: Path) -> Path:
    """A venv in ``folder`` holding exactly ``requirements`` (asyncbook's from ``wheel``);
    its Python."""
    venv.EnvBuilder(with_pip=True, clear=True).create(folder)
    python = folder / "bin" / "python"
    wanted = [
        f"{name} @ {wheel.as_uri()}" if name.split("[")[0] == "asyncbook" else name
        for name in requirements
    ]
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         "-c", str(constraints), *wanted],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return python


@pytest.fixture(scope="module")
def venvs(
    wheel: Path, constraints: Path, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[list[str]], Path]:
    """The Python of a fresh venv holding exactly these requirements (one venv per
    distinct install: the pages naming the same one share it)."""
    made: dict[tuple[str, ...], Path] = {}

    def python(requirements: list[str]) -> Path:
        key = tuple(sorted(requirements))
        if key not in made:
            folder = tmp_path_factory.mktemp("venv")
            made[key] = fresh_venv(folder, requirements, wheel, constraints)
        return made[key]

    return python


@pytest.mark.long
@pytest.mark.timeout(900)
@pytest.mark.usefixtures("snippet_namespaces")
@pytest.mark.parametrize("page", PAGES, ids=[page.name for page in PAGES])
def test_the_pages_snippets_run_from_the_wheel_with_only_its_install(
    page: Path, venvs: Callable[[list[str]], Path], tmp_path: Path
) -> None:
    python = venvs(page_install(page))
    away = tmp_path / "away"
    away.mkdir()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PYTHON", "VIRTUAL_ENV"))
    }
    sources = [source for where, source in SNIPPETS if where == page]
    assert sources, f"{page.name} has no Python block"
    for number, source in enumerate(sources):
        script = away / f"block{number}.py"
        script.write_text(source, encoding="utf-8")
        ran = subprocess.run(
            [str(python), "-I", str(script)],
            cwd=away, env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert ran.returncode == 0, f"{page.name} block {number}:\n{ran.stdout}{ran.stderr}"
    where = subprocess.run(
        [str(python), "-I", "-c", "import asyncbook; print(asyncbook.__file__)"],
        cwd=away, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert where.stdout.startswith(str(python.parents[1])), where.stdout  # the wheel's
