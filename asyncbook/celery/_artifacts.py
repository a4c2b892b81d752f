"""Results by reference in the result backend: a success whose encoded result reaches
``asyncbook_artifact_threshold`` bytes is written to the artifact store
(``asyncbook_artifacts``), and Celery's meta holds a marker naming it instead of the
body. The book records the marker's ref and hash as ``resultRef`` and ``resultHash``;
reading the meta (``AsyncResult.get()``) fetches the bytes and checks them.

What is stored: a ``bytes`` result as it is (``application/octet-stream``), a result
JSON holds as its canonical JSON (sorted keys, no spaces: its ``resultHash`` is the one
a result kept in Redis records), anything else as the backend's serializer encodes it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from kombu.serialization import dumps, loads

from .._book import AsyncBook
from ..artifacts import (
    ArtifactStore,
    OrphanReport,
    digest_of,
    fits,
    key_for,
    open_store,
    read,
    sweep_orphans,
)
from ..errors import ArtifactError, AsyncBookError, invalid

__all__ = [
    "MARKER",
    "ArtifactSettings",
    "Artifacts",
    "artifact_of",
    "discard_refused",
    "offload_success",
    "restored",
]

logger = logging.getLogger("asyncbook.celery")

MARKER = "__asyncbook_artifact__"
"""The one key of the dict Celery's meta holds in place of a result stored by reference."""

_JSON = "application/json"
_BYTES = "application/octet-stream"


def artifact_of(result: Any) -> Mapping[str, Any] | None:
    """The marker's fields (``ref``, ``hash``, ``size``, ``type``) when ``result`` is one."""
    if type(result) is dict and len(result) == 1 and MARKER in result:
        fields = result[MARKER]
        if isinstance(fields, dict) and isinstance(fields.get("ref"), str):
            return fields
    return None


def _whole(value: Any, name: str, minimum: int) -> int:
    if type(value) is not int or value < minimum:
        raise invalid(f"{name} must be a whole number >= {minimum}", field=name)
    return value


@dataclass(frozen=True)
class ArtifactSettings:
    """``asyncbook_artifacts`` (the store's URL; None keeps every result in Redis),
    ``asyncbook_artifact_options`` (boto3 client options for ``s3://``),
    ``asyncbook_artifact_threshold`` (bytes; a result this large or larger is stored by
    reference, 0: every success) and ``asyncbook_artifact_url_expiry`` (seconds a
    presigned URL lasts)."""

    url: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    threshold: int = 0
    url_expiry_s: int = 3600
    sweep_s: int = 3600
    """``asyncbook_artifact_sweep``: every worker's upkeep deletes, this often, the
    artifacts no record names that are older than this (0: never; the CLI still does)."""

    @classmethod
    def pop(cls, values: dict[str, Any]) -> ArtifactSettings:
        """Read (and remove) the artifact settings from ``values`` (names without
        ``asyncbook_``); a bad one is an error naming it."""
        url = values.pop("artifacts", None)
        options = values.pop("artifact_options", None) or {}
        if url is not None and (not isinstance(url, str) or not url.strip()):
            raise invalid(
                "asyncbook_artifacts must be a store's URL (file:///dir or s3://bucket/prefix)",
                field="asyncbook_artifacts",
            )
        if not isinstance(options, Mapping) or not all(isinstance(k, str) for k in options):
            raise invalid(
                "asyncbook_artifact_options must be a dict of boto3 client options",
                field="asyncbook_artifact_options",
            )
        if url is not None:
            try:
                open_store(url, options)
            except AsyncBookError as error:
                raise invalid(
                    f"asyncbook_artifacts: {error.message}", field="asyncbook_artifacts"
                ) from None
        threshold = _whole(
            values.pop("artifact_threshold", cls.threshold), "asyncbook_artifact_threshold", 0
        )
        expiry = _whole(
            values.pop("artifact_url_expiry", cls.url_expiry_s), "asyncbook_artifact_url_expiry", 1
        )
        sweep = _whole(values.pop("artifact_sweep", cls.sweep_s), "asyncbook_artifact_sweep", 0)
        return cls(url, dict(options), threshold, expiry, sweep)


class Artifacts:
    """The store of one app's results and how they are put there and read back."""

    def __init__(self, settings: ArtifactSettings, namespace: str) -> None:
        assert settings.url is not None
        self.settings = settings
        self.namespace = namespace
        self.store: ArtifactStore = open_store(settings.url, settings.options)

    def offload(
        self, task_id: str, result: Any, serializer: str, threshold: int | None = None
    ) -> dict[str, Any] | None:
        """Write ``result`` to the store when it is large enough; the marker to keep in
        its place (None: keep the result itself)."""
        data, content_type, codec = _encode(result, serializer)
        if len(data) < (self.settings.threshold if threshold is None else threshold):
            return None
        digest = digest_of(data)
        key = key_for(self.namespace, task_id, digest)
        if not fits(key):
            logger.warning(
                "asyncbook: the result of task %.80s... stays in Redis: its id is too long "
                "for a key of the artifact store",
                task_id,
            )
            return None
        ref = self.store.put(key, data, content_type)
        fields = {"ref": ref, "hash": digest, "size": len(data), "type": content_type}
        return {MARKER: {**fields, "codec": codec}}

    @classmethod
    def of(cls, settings: Any, integration: Any = None) -> Artifacts | None:
        """The store ``Settings`` configure (None: every result stays in Redis); its keys
        are under the namespace of the book ``install`` was given (else the setting's)."""
        store: ArtifactSettings = settings.artifacts
        if store.url is None:
            return None
        namespace = getattr(getattr(integration, "book", None), "namespace", None)
        return cls(store, namespace if isinstance(namespace, str) else settings.namespace)

    def offloaded(self, task_id: str, result: Any, task: Any, serializer: str) -> Any:
        """``result``, or the marker of its copy in the store when it is stored by
        reference (a task's ``artifact_threshold`` wins over the app's)."""
        if artifact_of(result) is not None:
            return result
        threshold = getattr(task, "artifact_threshold", None)
        marker = self.offload(task_id, result, serializer, threshold)
        return result if marker is None else marker

    def restore(self, fields: Mapping[str, Any], accept: Collection[str] | None) -> Any:
        """The result a marker names, fetched and checked against its hash; a type the
        backend's ``accept`` refuses is refused."""
        data = read(self.store, fields["ref"], str(fields.get("hash")))
        return _decode(data, fields, accept)

    def sweep(self, book: AsyncBook) -> OrphanReport:
        """Delete the namespace's artifacts no record names, older than ``sweep_s``."""
        report = sweep_orphans(
            self.store, book, self.namespace, older_than_s=self.settings.sweep_s, delete=True
        )
        if report.orphans:
            logger.info(
                "asyncbook: deleted %d artifact(s) no record names (%s)",
                len(report.orphans),
                self.namespace,
            )
        return report

    def discard(self, fields: Mapping[str, Any]) -> None:
        """Delete the artifact a marker names (its attempt's success was refused)."""
        self.store.delete([self.store.key_of(fields["ref"])])


def offload_success(
    artifacts: Artifacts | None, state: str, task_id: Any, result: Any, task: Any, serializer: str
) -> Any:
    """What the result backend stores for ``result``: for a SUCCESS with a store, the
    marker of its copy there when it is large enough; else ``result`` itself."""
    if artifacts is None or state != "SUCCESS" or not task_id:
        return result
    name = task_id.decode() if isinstance(task_id, bytes) else str(task_id)
    return artifacts.offloaded(name, result, task, serializer)


def discard_refused(artifacts: Artifacts | None, result: Any) -> None:
    """Delete the artifact of a success the book refused (expired, cancelled, ended): a
    failure to is logged, and the orphan sweep deletes it later."""
    stored = artifact_of(result)
    if stored is not None and artifacts is not None:
        try:
            artifacts.discard(stored)
        except AsyncBookError as error:
            logger.warning("asyncbook: could not delete %s: %s", stored["ref"], error)


def restored(
    meta: Any, artifacts: Callable[[], Artifacts | None], accept: Collection[str] | None
) -> Any:
    """A decoded meta whose result is stored by reference, with the result fetched and
    checked against its hash (``ArtifactError`` naming the ref when it does not match)."""
    stored = artifact_of(meta.get("result")) if meta.get("status") == "SUCCESS" else None
    if stored is None:
        return meta
    store = artifacts()
    if store is None:
        raise ArtifactError(stored["ref"], "asyncbook_artifacts is not configured here")
    meta["result"] = store.restore(stored, accept)
    return meta


def _encode(result: Any, serializer: str) -> tuple[bytes, str, str]:
    """The bytes stored, their content type, and the codec that reads them back:
    ``bytes`` as is, ``json`` (canonical), else ``kombu`` (the result serializer's)."""
    if isinstance(result, bytes | bytearray | memoryview):
        return bytes(result), _BYTES, "bytes"
    try:
        text = json.dumps(
            result, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    except (TypeError, ValueError):
        content_type, _encoding, data = dumps(result, serializer=serializer)
        encoded = data.encode("utf-8") if isinstance(data, str) else data
        return encoded, content_type, "kombu"
    return text.encode("utf-8"), _JSON, "json"


def _decode(data: bytes, fields: Mapping[str, Any], accept: Collection[str] | None) -> Any:
    codec = fields.get("codec")
    if codec == "bytes":
        return data
    if codec == "kombu":
        return loads(data, str(fields.get("type")), "binary", accept=accept)
    return json.loads(data)
