"""Every Python snippet in the README runs as written.

Snippets that talk to Redis use the default URL (db 0) and namespaces named
``readme-…``; their keys are removed after each snippet.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from ..support.books import delete_namespace

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


@pytest.fixture
def readme_namespaces() -> Iterator[None]:
    yield
    client = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    namespaces = {key.decode().split("}")[0][1:] for key in client.scan_iter(match="{readme-*")}
    for namespace in namespaces:
        delete_namespace(client, namespace)
    client.close()


@pytest.mark.usefixtures("readme_namespaces")
@pytest.mark.parametrize("source", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_snippet_runs(source: str) -> None:
    exec(compile(source, str(README), "exec"), {"__name__": "readme"})
