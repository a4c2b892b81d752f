"""The artifact store's one small interface, where a result's key lives in it, and the
check of its bytes against the hash the book recorded."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import quote, unquote

from ..errors import ArtifactError

__all__ = [
    "ArtifactStore",
    "Stored",
    "checked",
    "digest_of",
    "fits",
    "key_for",
    "task_of_key",
]

MAX_KEY_BYTES = 1024
"""The longest key S3 takes (UTF-8 bytes)."""
MAX_PART_BYTES = 255
"""The longest name of one path segment a file system takes (a local store's)."""


@dataclass(frozen=True, slots=True)
class Stored:
    """One object of a store: its key (below the store's prefix), its URL, its size and
    when it was written (seconds since the epoch)."""

    key: str
    ref: str
    size: int
    modified: float


class ArtifactStore(Protocol):
    """Where results too large for Redis live: a local directory (``LocalStore``) or an
    S3-compatible bucket (``S3Store``). A ref is the URL ``put`` returned."""

    url: str
    """The store's own URL (``file:///dir``, ``s3://bucket/prefix``)."""

    def put(self, key: str, data: bytes, content_type: str) -> str:
        """Write ``data`` at ``key`` (replacing it whole, never in part); its ref."""
        ...

    def get(self, ref: str) -> bytes:
        """The bytes at ``ref``; ``ArtifactError`` when it is not there or not this store's."""
        ...

    def delete(self, keys: list[str]) -> int:
        """Delete ``keys`` (absent ones are skipped); how many were asked."""
        ...

    def list(self, prefix: str) -> Iterator[Stored]:
        """Every object whose key starts with ``prefix``."""
        ...

    def key_of(self, ref: str) -> str:
        """The key ``ref`` names; ``ArtifactError`` when it is not in this store."""
        ...

    def presign(self, ref: str, expires_s: int) -> str | None:
        """A URL anyone holding it may read ``ref`` from for ``expires_s`` seconds (None
        where the store has none: a local directory)."""
        ...


def _part(text: str) -> str:
    """``text`` as one path segment, injectively: ``/``, ``%`` and ``.`` escaped."""
    return quote(text, safe="").replace(".", "%2E")


def key_for(namespace: str, task_id: str, digest: str) -> str:
    """The key of a result of ``task_id``: ``<namespace>/<task id>/<sha256 hex>``. Every
    artifact of a namespace, and every one of a task, is found by listing a prefix (the
    sweep, and deletion with the record, need no record). The hash makes two executions
    of one task (a redelivery) write two keys: neither overwrites the bytes the book
    recorded."""
    return f"{_part(namespace)}/{_part(task_id)}/{digest.removeprefix('sha256:')}"


def fits(key: str) -> bool:
    """True when every store takes ``key``: at most ``MAX_KEY_BYTES``, each segment at
    most ``MAX_PART_BYTES`` (a task id may take 4,096 characters; escaped, it may not fit,
    and its result then stays in Redis)."""
    return len(key.encode()) <= MAX_KEY_BYTES and all(
        len(part.encode()) <= MAX_PART_BYTES for part in key.split("/")
    )


def task_of_key(key: str) -> tuple[str, str] | None:
    """``(namespace, task id)`` of a key ``key_for`` made; None for any other key."""
    parts = key.split("/")
    if len(parts) != 3 or len(parts[2]) != 64:
        return None
    return unquote(parts[0]), unquote(parts[1])


def digest_of(data: bytes) -> str:
    """``sha256:<hex>`` of ``data``: what the book records as ``resultHash``."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def checked(ref: str, data: bytes, expected: str) -> bytes:
    """``data`` when it hashes to ``expected``; else ``ArtifactError`` naming ``ref``."""
    found = digest_of(data)
    if found != expected:
        raise ArtifactError(ref, f"its bytes hash to {found}, the record says {expected}")
    return data
