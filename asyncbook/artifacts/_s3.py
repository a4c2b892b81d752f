"""``S3Store``: artifacts in an S3-compatible bucket (AWS, MinIO, R2, GCS's S3 API),
through boto3 (``pip install 'asyncbook[s3]'``): Celery's own S3 result backend and
django-storages use it, it signs URLs itself, and it reads the usual AWS settings
(``AWS_ENDPOINT_URL``, credentials, profiles) from the environment."""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

from ..errors import ArtifactError
from ._store import Stored

__all__ = ["S3Store"]

_BATCH = 1000
"""Keys per DeleteObjects call (S3's limit)."""


def _client(options: Mapping[str, Any]) -> Any:
    try:
        boto3 = importlib.import_module("boto3")
    except ImportError:
        raise ArtifactError(
            "s3://", "an S3 store needs boto3: pip install 'asyncbook[s3]'", "unavailable"
        ) from None
    return boto3.session.Session().client("s3", **dict(options))


class S3Store:
    """An ``ArtifactStore`` on ``s3://bucket/prefix``; ``options`` go to
    ``boto3.client("s3", ...)`` (``endpoint_url``, ``region_name``, credentials...)."""

    def __init__(self, url: str, options: Mapping[str, Any] | None = None) -> None:
        parts = urlsplit(url)
        if parts.scheme != "s3" or not parts.netloc:
            raise ArtifactError(url, "an S3 store's URL is s3://bucket[/prefix]", "invalid-request")
        self.bucket = parts.netloc
        self.prefix = parts.path.strip("/")
        self.url = f"s3://{self.bucket}" + (f"/{self.prefix}" if self.prefix else "")
        self._options = dict(options or {})
        self._made: Any = None

    @property
    def client(self) -> Any:
        """boto3's S3 client, made on first use (thread-safe once made)."""
        if self._made is None:
            self._made = _client(self._options)
        return self._made

    def _full(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _error(self, ref: str, error: Exception) -> ArtifactError:
        code = getattr(error, "response", {}).get("Error", {}).get("Code", "")
        if code in ("NoSuchKey", "404", "NotFound"):
            return ArtifactError(ref, "not found in the store", "not-found")
        return ArtifactError(ref, f"the store did not answer: {error}", "unavailable")

    def put(self, key: str, data: bytes, content_type: str) -> str:
        ref = f"s3://{self.bucket}/{self._full(key)}"
        try:
            self.client.put_object(
                Bucket=self.bucket, Key=self._full(key), Body=data, ContentType=content_type
            )
        except Exception as error:
            raise self._error(ref, error) from error
        return ref

    def key_of(self, ref: str) -> str:
        parts = urlsplit(ref)
        path = parts.path.lstrip("/")
        inside = path.startswith(f"{self.prefix}/") if self.prefix else bool(path)
        if parts.scheme != "s3" or parts.netloc != self.bucket or not inside:
            raise ArtifactError(ref, f"not in the store {self.url}", "invalid-request")
        return path[len(self.prefix) + 1 :] if self.prefix else path

    def get(self, ref: str) -> bytes:
        key = self._full(self.key_of(ref))
        try:
            answer = self.client.get_object(Bucket=self.bucket, Key=key)
            return answer["Body"].read()  # type: ignore[no-any-return]
        except Exception as error:
            raise self._error(ref, error) from error

    def delete(self, keys: list[str]) -> int:
        try:
            for start in range(0, len(keys), _BATCH):
                batch = [{"Key": self._full(key)} for key in keys[start : start + _BATCH]]
                self.client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True}
                )
        except Exception as error:
            raise self._error(self.url, error) from error
        return len(keys)

    def list(self, prefix: str) -> Iterator[Stored]:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self._full(prefix)
        )
        cut = len(self.prefix) + 1 if self.prefix else 0
        try:
            for page in pages:
                for item in page.get("Contents", ()):
                    key, modified = item["Key"], item["LastModified"].timestamp()
                    ref = f"s3://{self.bucket}/{key}"
                    yield Stored(key[cut:], ref, int(item["Size"]), modified)
        except Exception as error:
            raise self._error(self.url, error) from error

    def presign(self, ref: str, expires_s: int) -> str | None:
        key = self._full(self.key_of(ref))
        try:
            url: str = self.client.generate_presigned_url(
                "get_object", Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=expires_s
            )
        except Exception as error:
            raise self._error(ref, error) from error
        return url
