"""Throwaway redis-server processes on loopback ports, stopped by PID."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import redis


def free_port() -> int:
    """A loopback TCP port nobody listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until(check: Callable[[], object], seconds: float = 20.0, what: str = "server") -> None:
    """Poll ``check`` until it returns truthy; Redis errors count as not yet."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            if check():
                return
        except (redis.RedisError, OSError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"the {what} did not come up")
        time.sleep(0.05)


@contextmanager
def redis_server(
    folder: Path, *args: str, program: str = "redis-server"
) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``program`` (redis-server or valkey-server) with ``args`` (bound to loopback,
    nothing on disk); stop it after."""
    folder.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(
        [program, *args, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(folder)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
