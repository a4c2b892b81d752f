"""Results by reference: a result too large for Redis is written to an artifact store,
and the book records its URL (``resultRef``) and the ``sha256:`` of its bytes
(``resultHash``). Two stores behind one interface (``ArtifactStore``): a local
directory (``file://``, the default kind) and S3-compatible storage (``s3://``, the
``asyncbook[s3]`` extra). ``read`` fetches a result and checks it against its hash.

This layer does I/O and knows neither Redis nor Celery: the result backend
(``asyncbook.celery``), the console and the CLI use it (docs/artifacts.md).
"""

from ._local import LocalStore
from ._open import Download, aread, download_for, open_store, read
from ._s3 import S3Store
from ._store import ArtifactStore, Stored, checked, digest_of, fits, key_for, task_of_key
from ._sweep import OrphanReport, sweep_orphans

__all__ = [
    "ArtifactStore",
    "Download",
    "LocalStore",
    "OrphanReport",
    "S3Store",
    "Stored",
    "aread",
    "checked",
    "digest_of",
    "download_for",
    "fits",
    "key_for",
    "open_store",
    "read",
    "sweep_orphans",
    "task_of_key",
]
