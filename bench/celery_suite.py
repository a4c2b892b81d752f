"""Celery's own integration tests as the judge: redis:// against asyncbook+redis://.

Downloads Celery's source distribution for the installed version into a temp dir
(``pip download --no-binary :all: --no-deps celery==<version>``; nothing of it is copied
into this repository), then runs its ``t/integration`` files with pytest twice, each
against Celery's embedded session worker (``celery_session_worker``, prefork), broker on
Redis: once with ``result_backend = redis://127.0.0.1:6379/<db>``, once with
``asyncbook+redis://127.0.0.1:6379/<db>`` plus ``asyncbook.celery.install`` on every
test app (a small pytest plugin written into the temp dir, passed with ``-p``). Each run
has a Redis db of its own (broker and results), flushed before and after; nothing else
is flushed. Celery's tests also keep their own counters in Redis db 0 (their
``get_redis_connection``), as they do upstream.

    .venv/bin/python bench/celery_suite.py                     # the three files
    .venv/bin/python bench/celery_suite.py --files test_tasks.py --per-test-timeout 60

Prints a Markdown table (passed/failed/skipped/errors per file and backend) and the
tests whose outcome differs. Results and what they mean: docs/celery-suite.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
from importlib.metadata import version
from pathlib import Path

import redis

HOST = "127.0.0.1:6379"
DEFAULT_FILES = ("test_tasks.py", "test_canvas.py", "test_backend.py", "test_redis_backend.py")
OUTCOMES = ("passed", "failed", "skipped", "errors")

PLUGIN = '''\
"""Written by asyncbook's bench/celery_suite.py: asyncbook on Celery's test apps.

Celery's tests pick their Redis-only paths by the URL's text
(``conf.result_backend.startswith("redis")``, ``TEST_BACKEND.startswith("redis://")``);
``RedisLike`` answers those for ``asyncbook+redis://`` as for ``redis://``, so the Redis
tests run instead of skipping. Everything else sees the real ``asyncbook+redis://`` URL.
"""
import sys

import celery.contrib.testing.app as _testing_app
from celery.app.backends import by_url

from asyncbook.celery import AsyncBookBackend, install

_PREFIX = "asyncbook+"


class RedisLike(str):
    def startswith(self, prefix, *args):
        if super().startswith(_PREFIX):
            return self[len(_PREFIX):].startswith(prefix, *args)
        return super().startswith(prefix, *args)


_TestApp = _testing_app.TestApp


def _asyncbook_test_app(*args, **kwargs):
    app = _TestApp(*args, **kwargs)
    app.conf.result_backend = RedisLike(app.conf.result_backend)
    install(app)
    # The class the URL selects, without creating (and caching) the app's backend.
    cls, _ = by_url(app.conf.result_backend, app.loader)
    if not issubclass(cls, AsyncBookBackend):
        raise RuntimeError(f"expected AsyncBookBackend, got {cls!r}")
    return app


_testing_app.TestApp = _asyncbook_test_app


def pytest_collectstart(collector):
    conftest = sys.modules.get("t.integration.conftest")
    if conftest is not None and not isinstance(conftest.TEST_BACKEND, RedisLike):
        conftest.TEST_BACKEND = RedisLike(conftest.TEST_BACKEND)
'''


def fetch_sources(workdir: Path) -> Path:
    """Celery's sdist for the installed version, extracted; its package dir removed."""
    celery_version = version("celery")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-binary",
            ":all:",
            "--no-deps",
            "--quiet",
            f"celery=={celery_version}",
            "-d",
            str(workdir),
        ],
        check=True,
        timeout=300,
    )
    archive = next(workdir.glob(f"celery-{celery_version}.tar.gz"))
    with tarfile.open(archive) as tar:
        tar.extractall(workdir, filter="data")
    root = workdir / f"celery-{celery_version}"
    # The tests import ``celery``: make that the installed package, not the sdist's copy.
    shutil.rmtree(root / "celery")
    return root


def parse_junit(path: Path) -> dict[str, str]:
    """test id -> passed / failed / skipped / errors."""
    outcomes: dict[str, str] = {}
    if not path.exists():
        return outcomes
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        tags = {child.tag for child in case}
        if "error" in tags:
            outcome = "errors"
        elif "failure" in tags:
            outcome = "failed"
        elif "skipped" in tags:
            outcome = "skipped"
        else:
            outcome = "passed"
        # A test failing and erroring in teardown appears twice: keep the worst.
        if outcomes.get(name) in ("failed", "errors") and outcome == "passed":
            continue
        outcomes[name] = outcome
    return outcomes


def run_file(
    root: Path,
    plugin_dir: Path,
    test_file: str,
    backend: str,
    db: int,
    per_test_timeout: int,
    file_timeout: float,
    log_dir: Path,
) -> tuple[dict[str, str], str]:
    """One pytest run of one file; (outcomes, note)."""
    label = "asyncbook" if backend.startswith("asyncbook") else "redis"
    client = redis.Redis.from_url(f"redis://{HOST}/{db}")
    client.flushdb()
    junit = log_dir / f"{label}-{test_file}.xml"
    log = log_dir / f"{label}-{test_file}.log"
    env = dict(os.environ)
    env.update(
        TEST_BROKER=f"redis://{HOST}/{db}",
        TEST_BACKEND=f"{backend}://{HOST}/{db}",
        REDIS_HOST=HOST.split(":")[0],
        REDIS_PORT=HOST.split(":")[1],
        PYTHONPATH=os.pathsep.join(filter(None, [str(plugin_dir), env.get("PYTHONPATH")])),
    )
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        f"t/integration/{test_file}",
        "-p",
        "no:cacheprovider",
        "-p",
        "celery.contrib.pytest",  # its markers (``celery``) and fixtures, as upstream's CI
        f"--timeout={per_test_timeout}",
        f"--junitxml={junit}",
        "-q",
        "-rfE",
    ]
    if label == "asyncbook":
        cmd += ["-p", "asyncbook_celery_suite_plugin"]
    note = ""
    started = time.monotonic()
    with log.open("w") as out:
        try:
            proc = subprocess.run(
                cmd, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=file_timeout
            )
            if proc.returncode not in (0, 1):
                note = f"pytest exit {proc.returncode}"
        except subprocess.TimeoutExpired:
            note = f"killed after {file_timeout:.0f}s"
    client.flushdb()
    outcomes = parse_junit(junit)
    if not outcomes and not note:
        note = "no results (see log)"
    elapsed = time.monotonic() - started
    print(f"  {label:9} {test_file:18} {elapsed:6.0f}s {count(outcomes)} {note}", flush=True)
    return outcomes, note


def count(outcomes: dict[str, str]) -> dict[str, int]:
    return {k: sum(1 for v in outcomes.values() if v == k) for k in OUTCOMES}


def cell(counts: dict[str, int], note: str) -> str:
    text = "/".join(str(counts[k]) for k in OUTCOMES)
    return f"{text} ({note})" if note else text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", nargs="+", default=list(DEFAULT_FILES))
    parser.add_argument("--redis-db", type=int, default=8, help="db of the redis:// run")
    parser.add_argument("--asyncbook-db", type=int, default=9, help="db of the asyncbook run")
    parser.add_argument("--per-test-timeout", type=int, default=120)
    parser.add_argument("--file-timeout", type=float, default=600.0)
    parser.add_argument("--total-timeout", type=float, default=1200.0)
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, xml)")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="asyncbook-celery-suite-"))
    deadline = time.monotonic() + args.total_timeout
    try:
        root = fetch_sources(workdir)
        plugin_dir = workdir / "plugin"
        plugin_dir.mkdir()
        (plugin_dir / "asyncbook_celery_suite_plugin.py").write_text(PLUGIN)
        log_dir = workdir / "logs"
        log_dir.mkdir()
        print(f"celery {version('celery')}, sources and logs in {workdir}", flush=True)

        rows = []
        differing: list[tuple[str, str, str]] = []
        for test_file in args.files:
            results: dict[str, tuple[dict[str, str], str]] = {}
            for backend, db in (("redis", args.redis_db), ("asyncbook+redis", args.asyncbook_db)):
                left = deadline - time.monotonic()
                if left < 30:
                    results[backend] = ({}, "not run: overall cap reached")
                    continue
                results[backend] = run_file(
                    root,
                    plugin_dir,
                    test_file,
                    backend,
                    db,
                    args.per_test_timeout,
                    min(args.file_timeout, left),
                    log_dir,
                )
            (plain, plain_note), (book, book_note) = results["redis"], results["asyncbook+redis"]
            rows.append((test_file, cell(count(plain), plain_note), cell(count(book), book_note)))
            for name in sorted(set(plain) | set(book)):
                a, b = plain.get(name, "absent"), book.get(name, "absent")
                if a != b:
                    differing.append((name, a, b))

        print()
        print("| file | redis:// p/f/s/e | asyncbook+redis:// p/f/s/e |")
        print("|---|---|---|")
        for test_file, a, b in rows:
            print(f"| {test_file} | {a} | {b} |")
        print()
        if differing:
            print("Differing outcomes (redis:// -> asyncbook+redis://):")
            for name, a, b in differing:
                print(f"- {name}: {a} -> {b}")
        else:
            print("No test's outcome differs.")
        return 1 if any(a == "passed" and b != "passed" for _, a, b in differing) else 0
    finally:
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
