"""A throwaway 3-master Redis Cluster on loopback ports (with a replica per master if
asked), stopped by PID."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from functools import partial
from pathlib import Path

import pytest
import redis

from .servers import redis_server, wait_until


def _free_base_port(count: int = 3) -> int:
    """A port p such that p..p+count-1 and their bus ports p+10000.. are free."""
    for base in range(21000, 25000, 7):
        ports = [base + i for i in range(count)] + [base + 10000 + i for i in range(count)]
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


class LocalCluster(list[int]):
    """The masters' ports, as they were created (a list, as ``local_cluster`` always
    yielded), and each node's process and role."""

    def __init__(
        self,
        masters: Sequence[int],
        processes: dict[int, subprocess.Popen[bytes]],
        replica_of: dict[int, list[int]],
        node_timeout_ms: int,
        start: Callable[[int], subprocess.Popen[bytes]],
    ) -> None:
        super().__init__(masters)
        self._start = start
        self.processes = processes
        """Every node's redis-server, by port (its ``pid``: to kill or stop one)."""
        self.replica_of = replica_of
        """Each first master's replicas, by the master's port (empty without replicas)."""
        self.node_timeout_ms = node_timeout_ms
        """``cluster-node-timeout``: a master silent this long is failed over."""

    def restart(self, port: int) -> None:
        """Start the node of ``port`` again (after it was killed), with its cluster state:
        a master failed over comes back as a replica of the node that took its slots."""
        self.processes[port] = self._start(port)
        wait_until(partial(_pings, port), what="cluster node")

    def client(self) -> redis.Redis:
        """A client of a node that is running (the first one alive)."""
        for port, process in self.processes.items():
            if process.poll() is None:
                return redis.Redis(port=port)
        raise RuntimeError("no node of the cluster is running")

    def owner(self, key: str) -> int:
        """The port of the master serving ``key``'s slot now, as a running node sees it."""
        client = self.client()
        try:
            slot = int(client.cluster("keyslot", key))
            for low, high, master, *_replicas in client.cluster("slots"):
                if int(low) <= slot <= int(high):
                    return int(master[1])
        finally:
            client.close()
        raise RuntimeError(f"no master serves slot {slot}")


def _nodes(port: int) -> list[list[str]]:
    """``CLUSTER NODES``: id, address, flags and master id of each node."""
    client = redis.Redis(port=port, decode_responses=True)
    try:
        nodes: dict[str, dict[str, str]] = client.cluster("nodes")  # parsed by redis-py
    finally:
        client.close()
    return [[r["node_id"], address, r["flags"], r["master_id"]] for address, r in nodes.items()]


def _replicas_linked(ports: list[int], count: int) -> bool:
    """Every replica's link to its master is up (its first sync done)."""
    linked = 0
    for port in ports:
        info = redis.Redis(port=port).info("replication")
        if info.get("role") == "slave" and info.get("master_link_status") == "up":
            linked += 1
    return linked == count


@contextmanager
def local_cluster(
    folder: Path, *, replicas: int = 0, node_timeout_ms: int = 5000
) -> Iterator[LocalCluster]:
    """Start three cluster-enabled masters (and ``replicas`` replicas of each), join them,
    yield their ports (a ``LocalCluster``), stop them all. ``node_timeout_ms`` is the
    ``cluster-node-timeout``: how long a master may be silent before it is failed over."""
    count = 3 * (1 + replicas)
    base = _free_base_port(count)
    ports = [base + i for i in range(count)]
    # A replica's first sync starts at once, not after the default 5 s of diskless delay.
    sync = ["--repl-diskless-sync-delay", "0"] if replicas else []
    processes: dict[int, subprocess.Popen[bytes]] = {}
    with ExitStack() as servers:

        def start(port: int) -> subprocess.Popen[bytes]:
            return servers.enter_context(
                redis_server(
                    folder / str(port),
                    "--port", str(port),
                    "--cluster-enabled", "yes",
                    "--cluster-config-file", "nodes.conf",
                    "--cluster-node-timeout", str(node_timeout_ms),
                    *sync,
                )
            )  # fmt: skip

        for port in ports:
            processes[port] = start(port)
        for port in ports:
            wait_until(partial(_pings, port), what="cluster node")
        subprocess.run(
            ["redis-cli", "--cluster", "create", *(f"127.0.0.1:{p}" for p in ports),
             "--cluster-replicas", str(replicas), "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=60,
        )  # fmt: skip
        for port in ports:
            wait_until(partial(_cluster_ok, port), what="cluster")
        if replicas:
            wait_until(partial(_replicas_linked, ports, 3 * replicas), what="replicas")
            # Every node's view of the roles has caught up (gossip): three masters.
            wait_until(lambda: len(_roles(ports)[0]) == 3, what="cluster roles")
        masters, replica_of = _roles(ports)
        yield LocalCluster(masters, processes, replica_of, node_timeout_ms, start)


def _roles(ports: list[int]) -> tuple[list[int], dict[int, list[int]]]:
    """The masters' ports, and each master's replicas by port (``CLUSTER NODES``)."""
    port_of: dict[str, int] = {}
    master_of: dict[int, str] = {}
    for node_id, address, flags, master_id, *_rest in _nodes(ports[0]):
        port = int(address.split("@")[0].rsplit(":", 1)[1])
        port_of[node_id] = port
        if "slave" in flags.split(","):
            master_of[port] = master_id
    masters = [port for port in ports if port not in master_of]
    replica_of: dict[int, list[int]] = {}
    for port, master in sorted(master_of.items()):
        replica_of.setdefault(port_of[master], []).append(port)
    return masters, replica_of
