"""``make demo`` runs end to end: on the real Redis, and embedded when nothing answers, from
a directory outside the checkout (the demo's app is in the package, not in ``workers/``)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import redis

from asyncbook.cli import _demo

from ..support import ROOT

URL = os.environ.get("ASYNCBOOK_DEMO_TEST_REDIS_URL", "redis://127.0.0.1:6379/13")


def run_demo(url: str, *options: str, cwd: Path | None = None) -> str:
    env = {**os.environ, "REDIS_URL": url}
    with tempfile.TemporaryDirectory(prefix="asyncbook-demo-test-") as away:
        done = subprocess.run(
            [sys.executable, "-m", "asyncbook.cli", "demo", *options],
            cwd=cwd or away,
            env=env,
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def check(output: str) -> None:
    lives = output.split("Each task's life", 1)[1]
    for line in [
        "generate (",
        "succeeded, attempts 1/3",
        "succeeded, attempts 2/4",
        "failed, attempts 1/3",
        "expired, attempts 1/1",
        "progress=50 cursor=chunk-5",
        "delivered: {",
        "duplicate-delivery: {",
    ]:
        assert line in lives, output
    assert lives.count("POST Idempotency-Key=") == 4, output
    assert "generate      running" in output  # live progress was shown
    assert "Status page (tasks, live progress, histories): http://127.0.0.1:" in output


@pytest.mark.timeout(120)
def test_demo_embedded_without_redis() -> None:
    output = run_demo("redis://127.0.0.1:1/0")
    assert "running embedded" in output
    check(output)


@pytest.mark.redis
@pytest.mark.timeout(120)
def test_demo_on_real_redis_cleans_up() -> None:
    client = redis.Redis.from_url(URL)
    try:
        client.ping()
    except redis.ConnectionError as error:  # pragma: no cover - environment problem
        pytest.fail(f"Redis at {URL} does not answer ({error}); .ci/run starts one")
    output = run_demo(URL)
    assert "a real worker" in output
    check(output)
    demo = output.split("namespace '", 1)[1].split("'", 1)[0]
    assert not list(client.scan_iter(match=f"*{demo}*"))
    client.close()


@pytest.mark.redis
@pytest.mark.timeout(120)
def test_make_demo_runs_the_checkouts_workers_configured_by_celeryconfig() -> None:
    """``make demo`` (``asyncbook demo --app workers`` in the checkout): the real worker is
    ``celery -A workers``, whose results go to asyncbook's backend (celeryconfig.py)."""
    client = redis.Redis.from_url(URL)
    output = run_demo(URL, "--app", "workers", cwd=ROOT)
    assert "a real worker (celery -A workers worker -B)" in output
    assert f"result backend asyncbook+{URL}" in output
    check(output)
    assert "Celery's result TaskExpired(" in output  # the backend says what the book says
    demo = output.split("namespace '", 1)[1].split("'", 1)[0]
    assert not list(client.scan_iter(match=f"*{demo}*"))
    client.close()


def test_demo_without_redis_nor_fakeredis_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "fakeredis", None)  # an install without the demo extra
    lines: list[str] = []
    with pytest.raises(SystemExit, match=r"pip install 'asyncbook\[demo\]'"):
        _demo.run("redis://127.0.0.1:1/0", lines.append)
    assert lines == []  # nothing started
