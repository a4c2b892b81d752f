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


@contextmanager
def primary_and_replica(
    folder: Path,
) -> Iterator[tuple[redis.Redis, redis.Redis, subprocess.Popen[bytes]]]:
    """A loopback redis-server and a replica of it (``--replicaof``), linked and in sync:
    clients of both and the replica's process; both stopped after."""
    primary_port, replica_port = free_port(), free_port()
    with (
        # The replica's first sync at once (not after the default 5 s of diskless delay).
        redis_server(
            folder / "primary", "--port", str(primary_port), "--repl-diskless-sync-delay", "0"
        ),
        redis_server(
            folder / "replica",
            "--port", str(replica_port),
            "--replicaof", "127.0.0.1", str(primary_port),
        ) as replica_process,
    ):  # fmt: skip
        primary, replica = redis.Redis(port=primary_port), redis.Redis(port=replica_port)
        wait_until(lambda: replica.info("replication")["master_link_status"] == "up")
        wait_until(lambda: primary.info("replication")["connected_slaves"] == 1)
        try:
            yield primary, replica, replica_process
        finally:
            primary.close()
            replica.close()
