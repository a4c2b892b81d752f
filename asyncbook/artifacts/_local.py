"""``LocalStore``: artifacts in a local directory (``file:///var/lib/asyncbook``), the
default kind: it needs nothing installed, and every process that reads the results must
see the same directory."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urlsplit

from ..errors import ArtifactError
from ._store import Stored

__all__ = ["LocalStore"]


class LocalStore:
    """An ``ArtifactStore`` on a directory; ``root`` is made on the first write."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve()
        self.url = self.root.as_uri()

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if not path.is_relative_to(self.root) or path == self.root:
            raise ArtifactError(f"{self.url}/{key}", "not a key of this store", "invalid-request")
        return path

    def put(self, key: str, data: bytes, content_type: str) -> str:
        path = self._path(key)
        for last in (False, False, True):  # a sweep may remove an emptied folder meanwhile
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                # Written beside, then renamed: a reader sees the whole file or none.
                handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".part-")
                break
            except FileNotFoundError:
                if last:
                    raise
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(data)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        return path.as_uri()

    def key_of(self, ref: str) -> str:
        parts = urlsplit(ref)
        if parts.scheme != "file" or parts.netloc not in ("", "localhost"):
            raise ArtifactError(ref, f"not in the store {self.url}", "invalid-request")
        path = Path(unquote(parts.path)).resolve()
        if not path.is_relative_to(self.root) or path == self.root:
            raise ArtifactError(ref, f"not in the store {self.url}", "invalid-request")
        return path.relative_to(self.root).as_posix()

    def get(self, ref: str) -> bytes:
        try:
            return self._path(self.key_of(ref)).read_bytes()
        except FileNotFoundError:
            raise ArtifactError(ref, "not found in the store", "not-found") from None
        except OSError as error:
            raise ArtifactError(ref, f"could not be read: {error}", "unavailable") from error

    def delete(self, keys: list[str]) -> int:
        for key in keys:
            path = self._path(key)
            path.unlink(missing_ok=True)
            for parent in (path.parent, path.parent.parent):
                if parent != self.root:
                    try:
                        parent.rmdir()  # only when empty
                    except OSError:
                        break
        return len(keys)

    def list(self, prefix: str) -> Iterator[Stored]:
        # os.walk skips a folder removed while it walks (another sweep's deletes).
        for folder, folders, files in os.walk(self.root):
            folders.sort()
            for name in sorted(files):
                path = Path(folder, name)
                key = path.relative_to(self.root).as_posix()
                if not key.startswith(prefix) or name.startswith(".part-"):
                    continue
                try:
                    stat = path.stat()
                except FileNotFoundError:  # deleted since it was listed
                    continue
                yield Stored(key, path.as_uri(), stat.st_size, stat.st_mtime)

    def presign(self, ref: str, expires_s: int) -> str | None:
        self.key_of(ref)
        return None
