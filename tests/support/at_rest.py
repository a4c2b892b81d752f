"""What a namespace holds at rest: every value of every key of it, as bytes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import redis


def _bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def values_at_rest(client: redis.Redis, namespace: str) -> Iterator[tuple[str, bytes]]:
    """Each key naming ``namespace`` with each value it holds (a string's, a hash's fields
    and values, a list's, a set's or sorted set's members, a stream's fields)."""
    for raw_key in client.scan_iter(match=f"*{namespace}*", count=1000):
        key = _bytes(raw_key).decode()
        kind = _bytes(client.type(raw_key)).decode()
        parts: list[Any] = []
        if kind == "string":
            parts = [client.get(raw_key) or b""]
        elif kind == "hash":
            for field, value in client.hgetall(raw_key).items():
                parts += [field, value]
        elif kind == "list":
            parts = list(client.lrange(raw_key, 0, -1))
        elif kind == "set":
            parts = list(client.smembers(raw_key))
        elif kind == "zset":
            parts = list(client.zrange(raw_key, 0, -1))
        elif kind == "stream":
            for _entry, fields in client.xrange(raw_key) or []:
                for field, value in (fields or {}).items():
                    parts += [field, value]
        for part in parts:
            yield key, _bytes(part)
