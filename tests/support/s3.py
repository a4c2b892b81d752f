"""A throwaway S3-compatible server (moto's standalone ``moto_server``) on a loopback
port, stopped by PID, and a bucket on it. Without the binary the tests that need it skip,
except under ``CI``, where they fail (CI installs it: it is in the dev lock)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .servers import free_port, wait_until

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}
"""moto accepts any credentials: these, for the test process and its workers."""


@dataclass(frozen=True)
class S3Server:
    """A running server: its endpoint, and the environment a worker needs to reach it."""

    endpoint: str

    @property
    def env(self) -> dict[str, str]:
        return {**CREDENTIALS, "AWS_ENDPOINT_URL": self.endpoint}

    @property
    def options(self) -> dict[str, Any]:
        """boto3 client options for it (``asyncbook_artifact_options``)."""
        return {
            "endpoint_url": self.endpoint,
            "region_name": CREDENTIALS["AWS_DEFAULT_REGION"],
            "aws_access_key_id": CREDENTIALS["AWS_ACCESS_KEY_ID"],
            "aws_secret_access_key": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        }

    def bucket(self, name: str | None = None) -> str:
        """A new bucket on it (a fresh name unless ``name``)."""
        import boto3

        name = name or f"ab-{uuid.uuid4().hex[:12]}"
        boto3.client("s3", **self.options).create_bucket(Bucket=name)
        return name


def _program() -> str | None:
    beside = Path(sys.executable).with_name("moto_server")
    return str(beside) if beside.exists() else shutil.which("moto_server")


@contextmanager
def s3_server(log: Path) -> Iterator[S3Server]:
    """``moto_server`` on a free loopback port until the block ends (then stopped by PID)."""
    program = _program()
    if program is None:
        if os.environ.get("CI"):
            pytest.fail("moto_server is not installed (the dev lock has moto[s3] and flask)")
        pytest.skip("moto_server is not installed")
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [program, "-H", "127.0.0.1", "-p", str(port)], stdout=out, stderr=subprocess.STDOUT
        )
    try:
        wait_until(lambda: urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1), 30, "S3")
        yield S3Server(endpoint)
    finally:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
