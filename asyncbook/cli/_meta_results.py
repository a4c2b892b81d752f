"""A result Celery keeps in Redis (``celery-task-meta-<id>``, the JSON result
serializer's), read as the bytes its ``resultHash`` hashes: its canonical JSON. For
``asyncbook result`` and, handed over by ``asyncbook serve``, the server's
``/api/tasks/{id}/result`` (the console shows a small result kept in Redis too)."""

from __future__ import annotations

import json
from typing import Any

from redis.exceptions import RedisError

from ..artifacts import checked
from ..errors import ArtifactError

__all__ = ["META_PREFIX", "meta_result"]

META_PREFIX = "celery-task-meta-"
"""How the name of the key of a result Celery keeps in Redis begins."""


def meta_result(client: Any, ref: str, digest: str) -> bytes | None:
    """The canonical JSON of the result at ``ref``, checked against ``digest``; None when
    ``ref`` names no Celery meta key; ``ArtifactError`` naming it when it is gone, not
    JSON, or does not match."""
    if not ref.startswith(META_PREFIX):
        return None
    try:
        raw = client.get(ref)
    except RedisError as error:
        raise ArtifactError(ref, f"Redis did not answer: {error}", "unavailable") from error
    if raw is None:
        raise ArtifactError(ref, "gone (its meta expired, or lives on another Redis)", "not-found")
    try:
        meta = json.loads(raw)
        value = meta["result"]
        data = json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        ).encode()
    except (ValueError, KeyError, TypeError):
        raise ArtifactError(
            ref, "not JSON (the result serializer is not json)", "not-found"
        ) from None
    return checked(ref, data, digest)
