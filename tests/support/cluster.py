"""A throwaway 3-master Redis Cluster on loopback ports, stopped by PID."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from functools import partial
from pathlib import Path

import pytest
import redis

from .servers import redis_server, wait_until


def _free_base_port() -> int:
    """A port p such that p..p+2 and their bus ports p+10000.. are free."""
    for base in range(21000, 25000, 7):
        ports = [base + i for i in range(3)] + [base + 10000 + i for i in range(3)]
        if all(_is_free(port) for port in ports):
            return base
    raise RuntimeError("no free ports for a local Redis Cluster")


def _is_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def require_binaries() -> None:
    """Skip when redis-server/redis-cli are truly absent; never in CI."""
    missing = [name for name in ("redis-server", "redis-cli") if shutil.which(name) is None]
    if missing:
        reason = f"{', '.join(missing)} not installed: these tests need a local redis-server"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)


def _pings(port: int) -> object:
    return redis.Redis(port=port).ping()


def _cluster_ok(port: int) -> bool:
    info: dict[str, str] = redis.Redis(port=port).cluster("info")
    return info["cluster_state"] == "ok"


@contextmanager
def local_cluster(folder: Path) -> Iterator[list[int]]:
    """Start three cluster-enabled masters, join them, yield their ports, stop them."""
    base = _free_base_port()
    ports = [base, base + 1, base + 2]
    with ExitStack() as servers:
        for port in ports:
            servers.enter_context(
                redis_server(
                    folder / str(port),
                    "--port", str(port),
                    "--cluster-enabled", "yes",
                    "--cluster-config-file", "nodes.conf",
                    "--cluster-node-timeout", "5000",
                )
            )  # fmt: skip
        for port in ports:
            wait_until(partial(_pings, port), what="cluster node")
        subprocess.run(
            ["redis-cli", "--cluster", "create", *(f"127.0.0.1:{p}" for p in ports),
             "--cluster-replicas", "0", "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=60,
        )  # fmt: skip
        for port in ports:
            wait_until(partial(_cluster_ok, port), what="cluster")
        yield ports
