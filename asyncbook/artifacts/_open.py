"""Opening a store by its URL, reading a result checked against its hash (from asyncio
too), and the presigned URL a delivery hands over."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from ..errors import ArtifactError
from ._local import LocalStore
from ._s3 import S3Store
from ._store import ArtifactStore, checked

__all__ = ["Download", "aread", "download_for", "open_store", "read"]


def open_store(url: str, options: Mapping[str, Any] | None = None) -> ArtifactStore:
    """The store at ``url``: ``file:///dir`` (or a plain path) or ``s3://bucket[/prefix]``
    (``options`` go to boto3's client: ``endpoint_url``, ``region_name``...)."""
    if not isinstance(url, str) or not url.strip():
        raise ArtifactError(
            str(url), "a store's URL is file:///dir or s3://bucket", "invalid-request"
        )
    parts = urlsplit(url)
    if parts.scheme == "s3":
        return S3Store(url, options)
    if parts.scheme == "file":
        return LocalStore(unquote(parts.path))
    if parts.scheme == "":
        return LocalStore(url)
    raise ArtifactError(
        url, f"no artifact store speaks {parts.scheme}:// (file:// or s3://)", "invalid-request"
    )


@dataclass(frozen=True)
class Download:
    """A URL anyone holding it may read a result from, until ``expires_at_ms``."""

    url: str
    expires_at_ms: int

    def wire(self) -> dict[str, Any]:
        """As the API answers it: ``{"url", "expiresAtMs"}``."""
        return {"url": self.url, "expiresAtMs": self.expires_at_ms}


def download_for(store: ArtifactStore, ref: str, expires_s: int) -> Download | None:
    """A presigned URL of ``ref`` lasting ``expires_s`` seconds, handed over beside a
    delivery's receipt; None when ``ref`` is not in ``store`` or the store signs no URL
    (a local directory)."""
    try:
        url = store.presign(ref, expires_s)
    except ArtifactError:
        return None
    if url is None:
        return None
    return Download(url, int(time.time() * 1000) + expires_s * 1000)


def read(store: ArtifactStore, ref: str, digest: str) -> bytes:
    """The bytes at ``ref``, checked against ``digest`` (``ArtifactError`` naming the ref
    when they do not match, are missing, or are not in ``store``)."""
    return checked(ref, store.get(ref), digest)


async def aread(store: ArtifactStore, ref: str, digest: str) -> bytes:
    """``read`` from asyncio, in a thread: the event loop is never blocked."""
    return await asyncio.to_thread(read, store, ref, digest)
