"""Throwaway redis-server processes on loopback ports for the benches, stopped by PID,
and the one way a bench removes the keys it wrote (``drop_keys``)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

# The benches share the tests' port and readiness helpers (tests/support/servers.py).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support.servers import free_port, wait_until

__all__ = [
    "drop_keys",
    "free_port",
    "redis_at",
    "start_redis",
    "stop_process",
    "throwaway_redis",
    "wait_until",
]


def stop_process(process: subprocess.Popen[bytes], seconds: float = 10.0) -> None:
    """SIGTERM ``process`` and wait for it; SIGKILL it if it outlives ``seconds``."""
    process.terminate()
    try:
        process.wait(seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(seconds)


def start_redis(
    port: int, folder: Path, *config: str, wrapper: Sequence[str] = (), seconds: float = 10.0
) -> subprocess.Popen[bytes]:
    """``redis-server`` with ``config`` on loopback ``port`` in ``folder`` (run under
    ``wrapper``, an argv prefix such as valgrind's, if given), once it answers PING."""
    process = subprocess.Popen(
        [*wrapper, "redis-server", "--port", str(port), "--bind", "127.0.0.1",
         "--dir", str(folder), *config],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    client = redis.Redis(port=port, retry=Retry(NoBackoff(), 0))  # wait_until does the retrying

    def answers() -> object:
        if process.poll() is not None:
            raise RuntimeError(f"redis-server exited with {process.returncode}: {config}")
        return client.ping()

    try:
        wait_until(answers, seconds, "redis-server")
    except BaseException:
        stop_process(process, seconds)
        raise
    finally:
        client.close()
    return process


@dataclass(frozen=True)
class Server:
    """A running throwaway redis-server: its port and process."""

    port: int
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"


@contextmanager
def throwaway_redis(
    *config: str, port: int = 0, wrapper: Sequence[str] = (), seconds: float = 10.0
) -> Iterator[Server]:
    """A redis-server with ``config`` (nothing on disk) on loopback ``port`` (0: a free
    one) in a folder of its own; stopped by PID and its folder removed after."""
    port = port or free_port()
    folder = Path(tempfile.mkdtemp(prefix="asyncbook-bench-"))
    try:
        nothing_on_disk = ("--save", "", "--appendonly", "no")
        process = start_redis(
            port, folder, *nothing_on_disk, *config, wrapper=wrapper, seconds=seconds
        )
        try:
            yield Server(port, process)
        finally:
            stop_process(process, seconds)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def redis_at(url: str | None) -> Iterator[str]:
    """``url``, or without one a throwaway redis-server's."""
    if url is not None:
        yield url
        return
    if shutil.which("redis-server") is None:
        raise SystemExit("no redis-server on PATH: pass a Redis URL")
    with throwaway_redis() as server:
        yield server.url


def drop_keys(client: Any, *patterns: str) -> int:
    """Delete every key matching one of ``patterns`` (``SCAN``, then ``DEL`` in chunks of
    500); returns how many went. A namespace's keys: ``"{" + namespace + "}:*"``."""
    dropped = 0
    for pattern in patterns:
        keys = list(client.scan_iter(match=pattern, count=1000))
        for at in range(0, len(keys), 500):
            dropped += client.delete(*keys[at : at + 500])
    return dropped
