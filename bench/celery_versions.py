"""The Celery versions asyncbook's result backend works with, each proved by the tests.

For each version given, builds a throwaway venv in a temp dir (``python -m venv``), installs
this repository editable with ``[all]`` plus the test tools of its ``dev`` extra, pins
``celery==<version>`` and ``kombu==<its minor>.*``, then runs ``tests/test_celery_backend.py``,
``tests/test_celery_groups.py`` and ``tests/test_celery_lifecycle.py`` from the repository
root (they need the test Redis, as ``make test`` does). ``latest`` installs the newest 5.x.

    .venv/bin/python bench/celery_versions.py                 # the lowest supported and latest
    .venv/bin/python bench/celery_versions.py 5.6.3 5.7.0 --keep

Prints a Markdown table (version -> passed/failed/skipped/errors) and the failing tests;
exits 1 when a version fails to install or any of its tests fails. Results:
docs/celery-suite.md, "Supported Celery versions".
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEST_FILES = (
    "tests/test_celery_backend.py",
    "tests/test_celery_groups.py",
    "tests/test_celery_lifecycle.py",
)
LOWEST = "5.7.0"
"""The lowest Celery whose run of the three files passes (see docs/celery-suite.md)."""
DEFAULT_VERSIONS = (LOWEST, "latest")
# Entries of the dev extra that the three files do not need (linters, stubs, the browser).
NOT_FOR_TESTS = ("asyncbook", "ruff", "mypy", "celery-types", "playwright")


@dataclass
class Outcome:
    """One version's run."""

    requested: str
    celery: str = "?"
    kombu: str = "?"
    installed: bool = False
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    errors: int = 0
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.installed and self.passed > 0 and not (self.failed or self.errors)


def test_requirements() -> list[str]:
    """The dev extra of pyproject.toml, less what the three test files do not use."""
    with (ROOT / "pyproject.toml").open("rb") as file:
        project = tomllib.load(file)["project"]
    dev: list[str] = project["optional-dependencies"]["dev"]
    return [req for req in dev if not req.lower().startswith(NOT_FOR_TESTS)]


def pins(version: str) -> list[str]:
    """Celery (and kombu, the same minor) as pip requirements."""
    if version == "latest":
        return ["celery>=5,<6"]
    major, minor = version.split(".")[:2]
    return [f"celery=={version}", f"kombu=={major}.{minor}.*"]


def run(command: list[str], log: Path, timeout: float, cwd: Path = ROOT) -> int:
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("PYTHONPATH", None)
    with log.open("ab") as out:
        out.write(("$ " + " ".join(command) + "\n").encode())
        out.flush()
        try:
            return subprocess.run(
                command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=timeout
            ).returncode
        except subprocess.TimeoutExpired:
            out.write(f"\n(timed out after {timeout:.0f} s)\n".encode())
            return -1


def installed_version(python: Path, package: str) -> str:
    code = f"from importlib.metadata import version; print(version({package!r}))"
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=False)
    return done.stdout.strip() or "?"


def read_junit(path: Path, outcome: Outcome) -> None:
    """Counts and failing test ids from pytest's junit xml."""
    suite = ET.parse(path).getroot()
    if suite.tag == "testsuites":
        suite = suite[0]
    for case in suite.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        if bad is not None:
            first = (bad.get("message") or "").strip().splitlines()[:1]
            outcome.failures.append(f"{name}: {first[0] if first else bad.tag}")
    tests = int(suite.get("tests", "0"))
    outcome.failed = int(suite.get("failures", "0"))
    outcome.errors = int(suite.get("errors", "0"))
    outcome.skipped = int(suite.get("skipped", "0"))
    outcome.passed = tests - outcome.failed - outcome.errors - outcome.skipped


def check(version: str, work: Path, args: argparse.Namespace) -> Outcome:
    """Build the venv for one Celery version and run the three files in it."""
    outcome = Outcome(requested=version)
    place = work / f"celery-{version}"
    place.mkdir()
    log = place / "log.txt"
    venv = place / "venv"
    python = venv / "bin" / "python"
    started = time.monotonic()
    install = [str(python), "-m", "pip", "install", "--quiet", "-e", f"{ROOT}[all]"]
    if (
        run([args.python, "-m", "venv", str(venv)], log, 300) != 0
        or run([*install, *test_requirements(), *pins(version)], log, args.install_timeout) != 0
    ):
        outcome.note = "install failed"
        outcome.seconds = time.monotonic() - started
        return outcome
    outcome.installed = True
    outcome.celery = installed_version(python, "celery")
    outcome.kombu = installed_version(python, "kombu")
    junit = place / "junit.xml"
    pytest = [str(python), "-m", "pytest", "-q", *TEST_FILES, "-p", "no:cacheprovider"]
    pytest += [f"--junitxml={junit}", *(["-x"] if args.exitfirst else [])]
    code = run(pytest, log, args.test_timeout)
    outcome.seconds = time.monotonic() - started
    if junit.exists():
        read_junit(junit, outcome)
    if code not in (0, 1):
        outcome.note = f"pytest exited {code}"
        outcome.errors = max(outcome.errors, 1)
    return outcome


def table(outcomes: list[Outcome]) -> str:
    lines = [
        "| celery | kombu | result | passed | failed | skipped | errors | seconds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for out in outcomes:
        result = "pass" if out.ok else (out.note or "FAIL")
        celery = out.requested if out.celery == "?" else out.celery
        celery += " (latest)" if out.requested == "latest" else ""
        lines.append(
            f"| {celery} | {out.kombu} | {result} | {out.passed} | {out.failed} "
            f"| {out.skipped} | {out.errors} | {out.seconds:.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "versions",
        nargs="*",
        default=list(DEFAULT_VERSIONS),
        help=f"Celery versions, or 'latest' (default: {' '.join(DEFAULT_VERSIONS)})",
    )
    parser.add_argument("--python", default=sys.executable, help="interpreter for the venvs")
    parser.add_argument("-x", "--exitfirst", action="store_true", help="pytest -x")
    parser.add_argument("--install-timeout", type=float, default=600.0)
    parser.add_argument("--test-timeout", type=float, default=900.0)
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (venvs, logs)")
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="asyncbook-celery-versions-"))
    outcomes: list[Outcome] = []
    try:
        for version in args.versions:
            print(f"celery {version}: installing and testing ...", file=sys.stderr, flush=True)
            outcome = check(version, work, args)
            outcomes.append(outcome)
            print(
                f"celery {version} -> {outcome.celery}: {'pass' if outcome.ok else 'FAIL'} "
                f"({outcome.seconds:.0f} s)",
                file=sys.stderr,
                flush=True,
            )
    finally:
        if args.keep:
            print(f"kept: {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    python = subprocess.run(
        [args.python, "--version"], capture_output=True, text=True, check=False
    ).stdout.strip()
    print(f"{python}, {' '.join(TEST_FILES)}\n")
    print(table(outcomes))
    for out in outcomes:
        if out.failures:
            print(f"\ncelery {out.requested}, failing tests:")
            for line in out.failures[:20]:
                print(f"- {line}")
    return 0 if outcomes and all(out.ok for out in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
