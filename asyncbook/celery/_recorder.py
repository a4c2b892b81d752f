"""``Recorder``: writes a worker process's events to the book, cheaply and in order.

Buffered events wait up to ``flush_delay``; a background thread sends whatever has
accumulated in one round trip (``apply_many``), every ``flush_delay`` while events keep
coming, and sleeps when none do. ``write`` sends the buffer and its own events at once,
synchronously: the integration uses it for an event that must be in the book before the
message is acknowledged (the end of an ``acks_late`` task, a retry before its
republish). One writer at a time keeps the order.

A book that does not answer is retried with backoff for ``retry_for`` seconds; then the
events are logged as an error naming their task ids, and the worker carries on (the
sweep still closes the task at its deadline).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from redis.exceptions import RedisError

from .._book import ApplyItem, AsyncBook, EventInput
from .._models import CallbackResult
from ..errors import AsyncBookError, BookUnavailableError

__all__ = ["Recorder", "retrying"]

logger = logging.getLogger("asyncbook.celery")

_Result = TypeVar("_Result")
_FIRST_DELAY = 0.05
_MAX_DELAY = 1.0
_REMEMBERED = 4096


def retrying(call: Callable[[], _Result], retry_for: float, what: str) -> _Result | None:
    """``call()``, retried with backoff for ``retry_for`` seconds; None if it never worked.

    Only errors of reaching Redis are retried. Any other ``AsyncBookError`` (a rejected
    input) propagates; anything else is logged with ``what`` and gives None at once.
    """
    deadline = time.monotonic() + retry_for
    delay = _FIRST_DELAY
    while True:
        try:
            return call()
        except (BookUnavailableError, RedisError, OSError) as error:
            if time.monotonic() + delay > deadline:
                logger.error("asyncbook: gave up on %s after %.1f s: %r", what, retry_for, error)
                return None
            logger.warning("asyncbook: %s failed (%r), retrying in %.2f s", what, error, delay)
            time.sleep(delay)
            delay = min(delay * 2, _MAX_DELAY)
        except AsyncBookError:
            raise
        except Exception:
            logger.exception("asyncbook: %s failed", what)
            return None


def _apply_many(book: AsyncBook, batch: Sequence[ApplyItem]) -> list[Any]:
    # The recorder reads only states and reasons: spare the book the histories.
    return list(book.apply_many(batch, full_task=False))


def _kind(event: EventInput) -> str:
    return str(event.get("type") if isinstance(event, Mapping) else event.type)


def _ends(event: EventInput) -> bool:
    return _kind(event) in ("succeed", "fail")


class Recorder:
    """Buffers start/progress events; writes terminal events at once, with them."""

    def __init__(
        self, book: Callable[[], AsyncBook], *, flush_delay: float, retry_for: float
    ) -> None:
        self._book_factory = book
        self._book: AsyncBook | None = None
        self.flush_delay = flush_delay
        self.retry_for = retry_for
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._pending: list[ApplyItem] = []
        self._wakeup = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._written: OrderedDict[str, None] = OrderedDict()

    def _check_fork(self) -> None:
        # A forked pool child inherits locks and a buffer, but not the flusher thread.
        if os.getpid() != self._pid:
            self._reset()

    @property
    def book(self) -> AsyncBook:
        """The book, built on first use (so a pool child builds its own connections)."""
        if self._book is None:
            self._book = self._book_factory()
        return self._book

    def buffer(self, item: ApplyItem) -> None:
        """Queue a non-terminal event; it is written within ``flush_delay``."""
        self._check_fork()
        with self._lock:
            self._pending.append(item)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="asyncbook-recorder", daemon=True
                )
                self._thread.start()
        self._wakeup.set()

    def write(self, *items: ApplyItem) -> list[CallbackResult | AsyncBookError | None]:
        """Write the buffer and ``items`` now, in one round trip; results of ``items``.

        A result is None when the book could not be reached within ``retry_for``.
        """
        self._check_fork()
        with self._write_lock:
            with self._lock:
                batch, self._pending = [*self._pending, *items], []
            results = self._send(batch)
            for item in items:
                if item[2] is not None:
                    self._remember(item[2])
        return results[len(results) - len(items) :] if items else []

    def flush(self) -> None:
        """Write whatever is buffered, now."""
        self.write()

    def written(self, callback: str) -> bool:
        """True if this process already wrote ``callback`` synchronously."""
        return callback in self._written

    def _remember(self, callback: str) -> None:
        self._written[callback] = None
        while len(self._written) > _REMEMBERED:
            self._written.popitem(last=False)

    def close(self) -> None:
        """Flush and stop the background thread."""
        self._stopping = True
        self._wakeup.set()
        thread = self._thread
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            thread.join(timeout=self.retry_for + 1)
        self.flush()

    def _run(self) -> None:
        while not self._stopping:
            self._wakeup.wait()
            self._wakeup.clear()
            # Tick while events keep coming, so a busy worker wakes no thread per task.
            while not self._stopping:
                if self.flush_delay > 0:
                    time.sleep(self.flush_delay)
                with self._write_lock:
                    with self._lock:
                        batch, self._pending = self._pending, []
                    self._send(batch)
                if not batch:
                    break

    def _send(self, batch: Sequence[ApplyItem]) -> list[CallbackResult | AsyncBookError | None]:
        if not batch:
            return []
        ids = sorted({item[0] for item in batch})
        results = retrying(
            lambda: _apply_many(self.book, batch),
            self.retry_for,
            f"writing {len(batch)} event(s) of task(s) {', '.join(ids)}",
        )
        if results is None:
            lost = [(task_id, event) for task_id, event, _ in batch]
            logger.error("asyncbook: events not recorded for task(s) %s: %r", ", ".join(ids), lost)
            return [None] * len(batch)
        for (task_id, event, _), result in zip(batch, results, strict=True):
            if isinstance(result, AsyncBookError):
                logger.error("asyncbook: task %s refused an event: %s", task_id, result)
            elif not result.changed and not result.duplicate_callback and _ends(event):
                logger.warning(
                    "asyncbook: task %s refused its %s (%s, state %s)",
                    task_id,
                    _kind(event),
                    result.reason,
                    result.task.state.value,
                )
        return list(results)
