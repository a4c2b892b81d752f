"""``Creates``: a publisher's creates, sent behind ``apply_async``.

``apply_async`` of a tracked task writes its create to Redis at once, on a connection of
its own, without waiting for the answer (``AsyncBook.create_sender``): Redis runs it a
network hop later, and the answers are read later, a batch at a time. A status lookup
from another process finds the task within a round trip of ``apply_async`` returning;
the publishing process reads its own writes (its books wait for ``flush`` first).

When Redis cannot be written to, the creates go to a thread that sends them in pipelined
batches, retried with backoff for ``retry_for``. The message says the publisher created
the task; if a create never lands (Redis down for longer, the publisher exited or was
killed first), the worker that runs the task creates it from the message when the book
answers "unknown", even after the task ended there (``Recorder``).

Answers left unread are read by a thread ``_SETTLE_AFTER`` after the last create (the
next creates read them sooner): a create that Redis did not run because it lost its script
(``SCRIPT FLUSH``, a restart on the same connection) is sent again then, even if the
publisher publishes nothing more.

An outage is logged once (a WARNING at the first failure), and once for each batch
given up (an ERROR); the retries are at DEBUG. A process that exits waits for its
creates at most ``exit_wait`` seconds (``asyncbook_exit_wait``), then says in one line
how many it left to the workers.
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

from .._book import AsyncBook, CreateSending, CreateSpec
from ..errors import AsyncBookError, BookUnavailableError
from ._retrying import retrying
from ._settler import Settler

__all__ = ["Creates"]

logger = logging.getLogger("asyncbook.celery")

_MAX_BATCH = 500
_GATHER = 0.002
"""Seconds the thread waits after the first queued create, for others to join it."""
_SETTLE_AFTER = 0.05
"""Seconds after a create that the settler reads the answers already arrived."""
_open: weakref.WeakSet[Creates] = weakref.WeakSet()


class Creates:
    """A process's creates: written at once, answers read later; retried by a thread
    while Redis cannot be written to."""

    def __init__(
        self, book: Callable[[], AsyncBook], *, retry_for: float, exit_wait: float = 2.0
    ) -> None:
        self._book = book
        self.retry_for = retry_for
        self.exit_wait = exit_wait
        """How long (s) the process waits for its creates when it exits."""
        self._outage = False
        """The book did not answer the last batch: the next one's failures are not
        warned of again."""
        self._reset()
        _open.add(self)
        book().wait_for_writes(self)  # this process's books of the namespace wait for it

    def _reset(self) -> None:
        self._sender: CreateSending | None = None
        self._pid = os.getpid()
        self._lock = threading.Condition()
        self._queue: deque[CreateSpec] = deque()
        self._current: list[CreateSpec] = []
        """The batch the thread is sending."""
        self._thread: threading.Thread | None = None
        self._settler = Settler(
            self, Creates._settle_once, lambda: _SETTLE_AFTER, "asyncbook-creates-settler"
        )
        """Woken by a create written: it reads the answer a moment later."""

    def _check_fork(self) -> None:
        # A forked child inherits the queue and the lock, not the thread: start afresh.
        if os.getpid() != self._pid:
            self._reset()

    def add(self, spec: CreateSpec) -> None:
        """Send one create without waiting for it; when Redis cannot be written to,
        queue it for the thread."""
        self._check_fork()
        sender = self._sender
        if sender is None:
            with self._lock:
                if self._sender is None:
                    self._sender = self._book().create_sender()
                sender = self._sender
        if sender is None:  # the book waits for its creates: the thread sends them
            self._queue_all([spec])
            return
        try:
            sender.send(spec)
        except BookUnavailableError:
            self._queue_all([spec, *sender.take_unanswered()])
        except AsyncBookError as error:
            logger.error("asyncbook: task %s could not be created: %s", spec.id, error)
        else:
            lost = sender.take_unanswered()  # an outage, or too few replicas, met them
            if lost:
                self._queue_all(lost)
        self._settler.soon()

    def _settle_once(self) -> bool:
        """Read the answers already here (the settler, ``_SETTLE_AFTER`` after a create);
        the creates an outage left unanswered go to the thread. True while answers are due."""
        sender = self._sender
        if sender is None:
            return False
        sender.settle()
        lost = sender.take_unanswered()
        if lost:
            self._queue_all(lost)
        return sender.pending()

    def _queue_all(self, specs: list[CreateSpec]) -> None:
        """Hand ``specs`` to the thread, which sends them with retries."""
        with self._lock:
            self._queue.extend(specs)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="asyncbook-creates", daemon=True
                )
                self._thread.start()
            self._lock.notify_all()

    def pending(self) -> bool:
        """True while creates are unanswered, queued or being sent."""
        sender = self._sender
        return bool(self._queue) or bool(self._current) or (sender is not None and sender.pending())

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every create so far was answered (at most ``timeout`` seconds,
        default ``retry_for`` plus a little, for those the thread retries); True if none
        is left."""
        self._check_fork()
        sender = self._sender
        if sender is not None:
            sender.collect()
            lost = sender.take_unanswered()
            if lost:
                self._queue_all(lost)
        wait = self.retry_for + 1.0 if timeout is None else timeout
        with self._lock:
            return self._lock.wait_for(lambda: not self._queue and not self._current, wait)

    def close(self) -> None:
        """Send what is left (waiting as ``flush`` does), then close the connection."""
        self.flush()
        if self._sender is not None:
            self._sender.close()
            lost = self._sender.take_unanswered()
            if lost:
                logger.error(
                    "asyncbook: %d create(s) unanswered at close; the workers create them",
                    len(lost),
                )

    def flush_at_exit(self) -> None:
        """Wait at most ``exit_wait`` for the creates left; say in one line what was left."""
        if self._pid != os.getpid() or not self.pending():
            return
        if self.flush(self.exit_wait):
            return
        with self._lock:
            left = [*self._current, *self._queue]
        logger.warning(
            "asyncbook: exiting with %d create(s) unsent after %.1f s (asyncbook_exit_wait), "
            "the book did not answer: the worker that runs each task creates it (%s)",
            len(left),
            self.exit_wait,
            _ids(left),
        )

    def _run(self) -> None:
        while True:
            with self._lock:
                self._lock.wait_for(lambda: bool(self._queue))
            time.sleep(_GATHER)  # let others join the batch
            with self._lock:
                batch = [self._queue.popleft() for _ in range(min(len(self._queue), _MAX_BATCH))]
                self._current = batch
            try:
                self._send(batch)
            finally:
                with self._lock:
                    self._current = []
                    self._lock.notify_all()

    def _send(self, batch: list[CreateSpec]) -> None:
        try:
            results = retrying(
                lambda: self._book().create_many(batch),
                self.retry_for,
                f"creating task(s) {_ids(batch)}",
                warn=not self._outage,
                then="the worker that runs each task creates it",
            )
        except AsyncBookError as error:  # a spec Python refused: none of the batch ran
            logger.error("asyncbook: task(s) %s could not be created: %s", _ids(batch), error)
            return
        self._outage = results is None
        if results is None:
            return
        for spec, result in zip(batch, results, strict=True):
            if isinstance(result, AsyncBookError):
                logger.error("asyncbook: task %s could not be created: %s", spec.id, result)


def _ids(specs: list[CreateSpec]) -> str:
    """The first ids of ``specs``, for a log line."""
    return ", ".join(spec.id for spec in specs[:5]) + (", ..." if len(specs) > 5 else "")


@atexit.register
def _flush_at_exit() -> None:
    """A script that publishes and exits still creates what it published, waiting for
    the book at most ``exit_wait``."""
    for creates in list(_open):
        creates.flush_at_exit()
