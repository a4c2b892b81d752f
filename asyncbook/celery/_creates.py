"""``Creates``: a publisher's creates, sent behind ``apply_async`` in pipelined batches.

``apply_async`` of a tracked task queues its create here and returns; one thread per
process sends whatever is queued in one pipelined round trip (``RedisBook.create_many``),
at once when idle, so a status lookup finds the task within a round trip or two of
``apply_async`` returning, and a burst of publishes shares round trips. ``flush`` waits
for what is queued (reads of this process that must see the task call it first).

The message says the publisher created the task. If the create does not land in time (the
book unreachable for longer than ``retry_for``, the publisher killed first), the worker
that runs the task creates it from the message when the book answers "unknown".
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable

from .._book import CreateSpec
from ..errors import AsyncBookError
from ..redis import RedisBook
from ..redis._pending import register
from ._recorder import retrying

__all__ = ["Creates"]

logger = logging.getLogger("asyncbook.celery")

_MAX_BATCH = 500
_GATHER = 0.002
"""Seconds the thread waits after the first queued create, for others to join it."""
_open: weakref.WeakSet[Creates] = weakref.WeakSet()


class Creates:
    """Queued creates of one process, sent in order by one thread."""

    def __init__(self, book: Callable[[], RedisBook], *, namespace: str, retry_for: float) -> None:
        self._book = book
        self.retry_for = retry_for
        self._reset()
        _open.add(self)
        register(namespace, self)  # this process's books of the namespace wait for it

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Condition()
        self._queue: deque[CreateSpec] = deque()
        self._sending = 0
        self._thread: threading.Thread | None = None

    def _check_fork(self) -> None:
        # A forked child inherits the queue and the lock, not the thread: start afresh.
        if os.getpid() != self._pid:
            self._reset()

    def add(self, spec: CreateSpec) -> None:
        """Queue one create; it is sent at once, or with the batch being gathered."""
        self._check_fork()
        with self._lock:
            self._queue.append(spec)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="asyncbook-creates", daemon=True
                )
                self._thread.start()
            self._lock.notify_all()

    def pending(self) -> bool:
        """True while creates are queued or being sent."""
        return bool(self._queue) or self._sending > 0

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every create queued so far was sent (at most ``timeout`` seconds,
        default ``retry_for`` plus a little); True if none is left."""
        self._check_fork()
        wait = self.retry_for + 1.0 if timeout is None else timeout
        with self._lock:
            return self._lock.wait_for(lambda: not self._queue and not self._sending, wait)

    def _run(self) -> None:
        while True:
            with self._lock:
                self._lock.wait_for(lambda: bool(self._queue))
            # Let a burst of publishes gather (without taking the GIL from them).
            time.sleep(_GATHER)
            with self._lock:
                batch = [self._queue.popleft() for _ in range(min(len(self._queue), _MAX_BATCH))]
                self._sending = len(batch)
            try:
                self._send(batch)
            finally:
                with self._lock:
                    self._sending = 0
                    self._lock.notify_all()

    def _send(self, batch: list[CreateSpec]) -> None:
        ids = ", ".join(spec.id for spec in batch[:5]) + (", ..." if len(batch) > 5 else "")
        try:
            results = retrying(
                lambda: self._book().create_many(batch),
                self.retry_for,
                f"creating task(s) {ids}",
            )
        except AsyncBookError as error:  # a spec Python refused: none of the batch ran
            logger.error("asyncbook: task(s) %s could not be created: %s", ids, error)
            return
        if results is None:
            logger.error(
                "asyncbook: task(s) %s not created by their publisher; the worker that runs "
                "each creates it",
                ids,
            )
            return
        for spec, result in zip(batch, results, strict=True):
            if isinstance(result, AsyncBookError):
                logger.error("asyncbook: task %s could not be created: %s", spec.id, result)


@atexit.register
def _flush_at_exit() -> None:
    """A script that publishes and exits still creates what it published."""
    for creates in list(_open):
        if creates._pid == os.getpid():
            creates.flush()
