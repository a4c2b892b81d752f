"""The status server agrees with its own OpenAPI document: schemathesis (every check, every
phase) against a running server on loopback, bounded in examples and time (``make
test-long``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from asyncbook import FailEvent, StartEvent

from ..support import ROOT
from ..support.web_server import WEB_REDIS_URL, running_server

TOKEN = "schemathesis-token-0123456789"
HOUR = 3_600_000
MAX_EXAMPLES = 25
MAX_SECONDS = 180
SCHEMATHESIS = Path(sys.executable).with_name("st")


@pytest.mark.long
@pytest.mark.timeout(MAX_SECONDS + 120)
def test_schemathesis_finds_no_disagreement(tmp_path: Path) -> None:
    with running_server(token=TOKEN, broker_url=WEB_REDIS_URL) as server:
        # The run sends wrong tokens on purpose, hundreds of them: they are to be 401s.
        server.app.state.login_throttle.failures = 10**9
        book, now = server.book, server.book.now_ms()
        book.create(id="queued", now_ms=now, ttl_ms=HOUR, max_attempts=2)
        book.create(id="failed", now_ms=now, ttl_ms=HOUR, max_attempts=1, group_id="g")
        book.apply("failed", StartEvent(at_ms=now + 1, worker="w1"))
        book.apply("failed", FailEvent(at_ms=now + 2, error="boom", retryable=False))
        command = [
            str(SCHEMATHESIS), "run", f"{server.url}/openapi.json",
            "--checks", "all",
            "--max-examples", str(MAX_EXAMPLES),
            "--max-time", str(MAX_SECONDS),
            "--seed", "30",
            "--workers", "1",
            "--no-color",
            "--header", f"Authorization: Bearer {TOKEN}",
        ]  # fmt: skip
        env = {
            **os.environ,
            "SCHEMATHESIS_HOOKS": "tests.support.schemathesis_hooks",
            "PYTHONPATH": str(ROOT),
        }
        result = subprocess.run(
            command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=MAX_SECONDS + 60
        )
    assert result.returncode == 0, result.stdout[-30_000:] + result.stderr[-5_000:]
