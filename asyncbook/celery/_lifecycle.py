"""Lifecycle controls in a worker: heartbeats of running tasks, and cancellation.

``Heartbeats`` runs in every process that executes tracked tasks: one thread sends one
``book.heartbeat(ids)`` round trip per interval for all of them. ``CancelWatch`` runs in
the worker's main process: it follows the book's change channel, and a task cancelled
there (by ``asyncbook.celery.cancel``, the CLI, the status server) joins Celery's own
revoked set, so the worker discards its message without running it, and the
``CancelledRing`` its pool processes share, so a running one stops at its next
``report_progress``.
"""

from __future__ import annotations

import hashlib
import logging
import mmap
import os
import threading
from collections.abc import Callable
from typing import Any

from celery.exceptions import Ignore

from .._book import AsyncBook
from ..errors import AsyncBookError

__all__ = ["CancelWatch", "CancelledRing", "Heartbeats", "TaskCancelled", "held_requests"]

logger = logging.getLogger("asyncbook.celery")

RECENT_CANCELS = 1000
"""Cancelled tasks read from the book whenever the watch (re)subscribes."""


class TaskCancelled(Ignore):
    """Raised by ``report_progress`` in a task whose record was cancelled.

    Let it propagate: the task stops between chunks, Celery records no result for it
    (``Ignore``), and the book already says ``cancelled``.
    """

    def __init__(self, task_id: str, reason: str | None) -> None:
        # args are the constructor's: it pickles (a prefork pool process sends the task's
        # outcome to the main process) and rebuilds from them.
        super().__init__(task_id, reason)
        self.task_id = task_id
        self.reason = reason

    def __str__(self) -> str:
        return f"task {self.task_id} was cancelled: {self.reason or 'cancelled'}"


class CancelledRing:
    """Task ids recently cancelled in the book, in memory a worker's main process shares
    with the pool processes it forks: ``CancelWatch`` (main process) adds them, and
    ``report_progress`` (any process) looks its task up without a round trip.

    Made before the pool forks (``worker_init``). Fixed size: the oldest entries are
    overwritten. Ids are kept as 16-byte digests; one writer thread, readers never lock
    (a torn read can only miss an entry, and the book's answer to the task's next
    progress event tells the task then).
    """

    SLOT = 16
    _HEADER = 8  # entries ever written, little-endian

    def __init__(self, slots: int = 4096) -> None:
        self.slots = slots
        # Anonymous and MAP_SHARED: the same pages in every process forked from here.
        self._memory = mmap.mmap(-1, self._HEADER + slots * self.SLOT)
        self._lock = threading.Lock()

    @classmethod
    def _digest(cls, task_id: str) -> bytes:
        data = task_id.encode("utf-8", "surrogatepass")
        return hashlib.blake2b(data, digest_size=cls.SLOT).digest()

    def _written(self) -> int:
        return int.from_bytes(self._memory[: self._HEADER], "little")

    def _find(self, digest: bytes) -> bool:
        end = self._HEADER + min(self._written(), self.slots) * self.SLOT
        at = self._memory.find(digest, self._HEADER, end)
        while at >= 0:
            if (at - self._HEADER) % self.SLOT == 0:
                return True
            at = self._memory.find(digest, at + 1, end)
        return False

    def add(self, task_id: str) -> None:
        """Remember ``task_id`` as cancelled (for this process and its pool)."""
        digest = self._digest(task_id)
        with self._lock:
            if self._find(digest):
                return
            written = self._written()
            offset = self._HEADER + (written % self.slots) * self.SLOT
            self._memory[offset : offset + self.SLOT] = digest
            self._memory[: self._HEADER] = (written + 1).to_bytes(self._HEADER, "little")

    def __contains__(self, task_id: object) -> bool:
        return isinstance(task_id, str) and self._find(self._digest(task_id))


class Heartbeats:
    """This process's running tracked executions, and the thread that beats for them."""

    def __init__(self, book: Callable[[], AsyncBook], interval: float) -> None:
        self._book = book
        self.interval = interval
        self._reset()

    def _reset(self) -> None:
        # At first, and in a forked pool child: its own lock, executions and thread.
        self._pid, self._lock = os.getpid(), threading.Lock()
        self._running: dict[str, int] = {}
        self._wakeup = threading.Event()
        self._thread: threading.Thread | None = None
        self.beats = 0
        """Heartbeat round trips this process sent (for tests and benchmarks)."""

    def add(self, task_id: str) -> None:
        """An execution of ``task_id`` started in this process."""
        if os.getpid() != self._pid:
            self._reset()  # a forked pool child: its own thread, its own executions
        with self._lock:
            self._running[task_id] = self._running.get(task_id, 0) + 1
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="asyncbook-heartbeat", daemon=True
                )
                self._thread.start()

    def discard(self, task_id: str) -> None:
        """An execution of ``task_id`` ended in this process."""
        with self._lock:
            left = self._running.get(task_id, 0) - 1
            if left > 0:
                self._running[task_id] = left
            else:
                self._running.pop(task_id, None)

    def stop(self) -> None:
        """Stop beating (the thread ends within one interval)."""
        self._wakeup.set()

    def _run(self) -> None:
        while not self._wakeup.wait(self.interval):
            with self._lock:
                ids = list(self._running)
            if not ids:
                continue
            try:
                self._book().heartbeat(ids)
                self.beats += 1
            except (AsyncBookError, OSError, ConnectionError) as error:
                # A missed beat is no harm: the next one, or start/progress, moves it on.
                logger.debug("asyncbook: heartbeat of %d task(s) failed: %r", len(ids), error)
            except Exception as error:
                logger.warning("asyncbook: heartbeat failed: %r", error)


class CancelWatch:
    """Follows the book's cancels in a worker's main process (their own channel: no other
    change wakes it); calls ``revoke(task_id)`` for every task cancelled in the book, so
    Celery discards its message unrun.

    Pub/sub forgets what was published while nobody listened: after every (re)subscribe
    the book itself is asked for its most recently cancelled tasks.
    """

    def __init__(self, book: AsyncBook, revoke: Callable[[str], None]) -> None:
        self.book = book
        self.revoke = revoke
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def follower(self) -> Callable[[], None] | None:
        """The loop ``start`` runs (``AsyncBook.watch_cancels``); None when the book
        publishes no cancels."""
        return self.book.watch_cancels(
            self.revoke, on_subscribe=self._catch_up, stop=self._stop.is_set
        )

    def start(self, follow: Callable[[], None]) -> None:
        """Start following (``follow``, from ``follower``), in a daemon thread."""
        self._thread = threading.Thread(target=follow, name="asyncbook-cancel-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop following."""
        self._stop.set()

    def _catch_up(self) -> None:
        try:
            page = self.book.list_tasks(state="cancelled", limit=RECENT_CANCELS, full_task=False)
        except AsyncBookError as error:
            logger.warning("asyncbook: could not read the cancelled tasks: %s", error)
            return
        for task in page.tasks:
            self.revoke(task.id)


def add_to_revoked(task_id: str) -> None:
    """Put ``task_id`` in this worker's revoked set (as a ``revoke`` broadcast does)."""
    from celery.worker import state

    state.revoked.add(task_id)


def held_requests(task_id: str, timer: Any = None) -> list[Any]:
    """This worker's requests of ``task_id``: running, reserved, or held for their eta
    (Celery 5.7 lists those; before it, they are only in the consumer's ``timer``)."""
    from celery.worker import state

    found = [state.requests.get(task_id)]
    scheduled = getattr(state, "scheduled_requests", None)
    if scheduled is not None:
        found += [request for request in list(scheduled) if request.id == task_id]
    elif timer is not None:
        for event in list(getattr(timer, "queue", ())):
            args = getattr(getattr(event, "entry", None), "args", None) or ()
            if args and getattr(args[0], "id", None) == task_id:
                found.append(args[0])
    unique = {id(request): request for request in found if request is not None}
    return list(unique.values())
