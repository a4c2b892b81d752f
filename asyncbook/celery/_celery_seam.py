"""The one seam between asyncbook's result backend and Celery's ``RedisBackend``.

asyncbook writes the meta of a tracked execution itself, in the script that writes the
book's events (``lua/execution.lua``), so it needs the meta exactly as Celery would have
written it: the key, the encoded value, the expiry. It gets them from Celery without
building them: ``MetaCapture.capture`` runs Celery's own public ``store_result`` with this
thread's ``set`` of that task's key (Celery's key names are bytes; the one that ends with
the task's id) taken instead of sent. ``get``, ``set`` and
``get_key_for_task`` are the hooks a key-value backend implements (Celery's
``KeyValueStoreBackend``: every key-value backend Celery ships implements ``get``, ``set``,
``mget``, ``delete`` and nothing private), and ``store_result`` is the public write.

No private Celery name is used. Celery's reference (its internals pages, generated from
the code) lists these methods but does not say what ``store_result`` does with them: that
is what is relied on, and each point is checked on every supported Celery minor by
``tests/celery/test_backend_seam.py``:

1. ``store_result(task_id, result, state, traceback, request)`` encodes the result
   (``encode_result``), builds the meta (status, result, traceback, children, date_done,
   group_id, parent_id, the extended fields), encodes it (``encode``) and writes it with
   one ``set(get_key_for_task(task_id), value)``, the key bytes ending with the id;
   Celery 5.7 passes ``expires=failure_expires`` for a FAILURE
   (``result_failure_expires``), earlier minors pass no expiry (``result_expires``). If
   Celery wrote the meta another way, ``capture`` would take nothing and raise
   ``CelerySeamError`` (never a silent loss of the meta).
2. Before that ``set``, it reads the stored meta with ``get(get_key_for_task(task_id))``
   and writes nothing when it is SUCCESS (Celery's guard against a lost worker's late
   write). ``capture(read_stored=False)`` answers that read with "none stored", so no
   round trip is spent on it: the caller runs the guard in its script instead (JSON metas),
   or needs none (a verdict of the book). With ``read_stored=True`` Celery's own guard
   reads Redis and may keep the stored SUCCESS: ``MetaWrite.value`` is then None.
3. A too-large meta: Celery's ``RedisBackend.set`` refuses a ``str`` value longer than a
   Redis string may be (512 MiB) with ``BackendStoreError``, which ``store_result``
   raises with the task's ``state`` and ``task_id``. A captured ``set`` does the same
   check with ``REDIS_STRING_LIMIT``, Redis's documented limit (Celery's own constant for
   it is private and not read).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from celery.backends.redis import RedisBackend
from celery.exceptions import BackendStoreError

__all__ = ["REDIS_STRING_LIMIT", "CelerySeamError", "MetaCapture", "MetaWrite"]

REDIS_STRING_LIMIT = 512 * 1024 * 1024
"""The longest string value Redis stores (its documented 512 MB): a longer meta is
refused with ``BackendStoreError``, as Celery's ``RedisBackend.set`` refuses it."""


class CelerySeamError(RuntimeError):
    """Raised when Celery's ``store_result`` no longer writes a task's meta through the
    backend's ``get`` and ``set`` as this module relies on (a Celery this asyncbook does
    not support): the meta is never dropped silently."""


@dataclass(frozen=True, slots=True)
class MetaWrite:
    """The meta write Celery's ``store_result`` made, taken instead of sent."""

    key: bytes
    """The meta key Celery wrote (or read), ``get_key_for_task(task_id)``."""
    value: str | bytes | None
    """The encoded meta; None when Celery's guard found a stored SUCCESS and wrote nothing
    (only with ``read_stored=True``)."""
    expires: Any
    """The expiry Celery gave ``set`` (None: the backend's ``expires``)."""
    encoded: Any
    """The result as Celery encoded it (what ``store_result`` returns)."""


class _Taking(threading.local):
    """This thread's capture: the task whose key's ``set`` is taken (a key of Celery's
    naming that ends with the task's id), the key its guard read, and what was taken."""

    suffix: bytes | None = None
    read_stored = True
    state = ""
    task_id = ""
    read: bytes | None = None
    taken: tuple[bytes, Any, Any] | None = None


_RedisBackend: Any = RedisBackend  # celery-types describes RedisBackend partly


class MetaCapture(_RedisBackend):  # type: ignore[misc]
    """Celery's ``RedisBackend`` whose ``get`` and ``set`` can take one task's meta write
    (``capture``); every other call, and every call of another thread, is Celery's."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._taking = _Taking()
        super().__init__(*args, **kwargs)

    def get(self, key: Any) -> Any:
        """Celery's ``get``; during a ``capture(read_stored=False)``, its guard's read of
        the captured key answers "none stored" without a round trip."""
        taking = self._taking
        suffix = taking.suffix
        if suffix is not None and isinstance(key, bytes) and key.endswith(suffix):
            taking.read = key
            if not taking.read_stored:
                return None
        return super().get(key)

    def set(self, key: Any, value: Any, expires: Any = None, **retry_policy: Any) -> Any:
        """Celery's ``set``; during a ``capture``, the captured key's write is taken."""
        taking = self._taking
        suffix = taking.suffix
        if suffix is not None and isinstance(key, bytes) and key.endswith(suffix):
            if isinstance(value, str) and len(value) > REDIS_STRING_LIMIT:
                store_error: Any = BackendStoreError  # celery-types lacks its keywords
                raise store_error(
                    "value too large for Redis backend",
                    state=taking.state,
                    task_id=taking.task_id,
                )
            taking.taken = (key, value, expires)
            return None
        if expires is None:  # Celery before 5.7 has no expires parameter
            return super().set(key, value, **retry_policy)
        return super().set(key, value, expires=expires, **retry_policy)

    def capture(
        self,
        task_id: str,
        result: Any,
        state: str,
        traceback: Any = None,
        request: Any = None,
        *,
        read_stored: bool,
        **kwargs: Any,
    ) -> MetaWrite:
        """What Celery's ``store_result`` would write for ``task_id``, without writing it:
        Celery's key, encoded meta and expiry. ``read_stored``: let Celery's guard read the
        stored meta (and keep a stored SUCCESS); else its read answers "none stored"."""
        taking = self._taking
        if taking.suffix is not None:
            raise CelerySeamError("a meta capture is already running on this thread")
        taking.suffix, taking.read_stored, taking.read, taking.taken = (
            task_id.encode(),
            read_stored,
            None,
            None,
        )
        taking.state, taking.task_id = state, task_id
        try:
            encoded = super().store_result(task_id, result, state, traceback, request, **kwargs)
            taken, read = taking.taken, taking.read
        finally:
            taking.suffix, taking.read, taking.taken = None, None, None
        if taken is None:
            if read_stored and read is not None:
                return MetaWrite(read, None, None, encoded)  # Celery kept a stored SUCCESS
            raise CelerySeamError(
                f"Celery's store_result wrote no meta for task {task_id} through the "
                "backend's set(): this Celery is not one asyncbook's backend supports"
            )
        key, value, expires = taken
        return MetaWrite(key, value, expires, encoded)
