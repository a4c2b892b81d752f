"""``Controls``: the integration's part for the lifecycle controls. It cancels (in the
book, then revoked in Celery), writes a revoke's cancel to the book before it is
broadcast, reads a task's checkpoint, and in a worker follows the book's cancels into
Celery's revoked set and the ring its pool processes share."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from celery import Celery, Task, signals, states
from celery.exceptions import TaskRevokedError

from .._book import AsyncBook
from .._models import CallbackResult, CancelEvent
from ..errors import UnknownTaskError
from ._lifecycle import CancelledRing, CancelWatch, add_to_revoked, held_requests
from ._recorder import Recorder
from ._revoke import cancelled_here
from ._state import Handler, Lazy, Running
from ._tracking import callback_id

__all__ = ["Controls"]

logger = logging.getLogger("asyncbook.celery")


@dataclass(eq=False)
class Controls:
    """The integration's share of the lifecycle controls: cancel (in the book, then
    revoked), the cancels a worker follows, the ring its pool shares, the checkpoint."""

    app: Celery
    book: Lazy[AsyncBook]
    recorder: Lazy[Recorder]
    running: Running
    flush_creates: Callable[[], None]
    timer: Any = field(default=None, init=False)

    def cancel(
        self,
        task_id: str,
        reason: str | None = None,
        *,
        terminate: bool = False,
        actor: str | None = None,
    ) -> CallbackResult:
        """Cancel in the book now (audited with ``actor``), then revoke in Celery (every
        worker discards it)."""
        self.flush_creates()  # a task this process just published is in the book first
        book = self.book.get()
        if actor is None:  # a book of your own may take no actor: passed only when given
            result = book.cancel(task_id, reason)
        else:
            result = book.cancel(task_id, reason, actor=actor)
        with cancelled_here(task_id):  # the revoke's own cancel would only repeat it
            self.app.control.revoke(task_id, terminate=terminate)
        return result

    def last_cursor(self, task: Task[Any, Any]) -> str | None:
        """The cursor the task last reported, in this attempt or an earlier one."""
        task_id = task.request.id
        if task_id is None:
            return None
        self.recorder.get().flush()
        try:
            return self.book.get().last_cursor(str(task_id))
        except UnknownTaskError:
            return None

    def on_worker_init(self, sender: Any = None, **_: Any) -> None:
        """A worker is made, its pool not yet forked: make the ring of cancelled tasks its
        pool processes will share."""
        running = self.running
        if getattr(sender, "app", None) is self.app and running.ring is None:
            running.ring = CancelledRing()

    def watch_cancels(self, timer: Any = None) -> None:
        """Follow the book's cancels in this (main) process, when the book publishes them
        (``timer``: the worker consumer's, which holds the messages waiting for an eta)."""
        self.timer = timer
        running = self.running
        process = running.process
        if process.cancel_watch is not None:
            return
        watch = CancelWatch(self.book.get(), self._revoke_cancelled)
        follow = watch.follower()
        if follow is None:
            return  # the book publishes no cancels: a running task learns at its progress
        if running.ring is None:  # no worker_init (an embedded worker): this process only
            running.ring = CancelledRing()
        process.cancel_watch = watch
        watch.start(follow)

    def cancel_revoked(self, task_ids: list[str], terminated: bool) -> None:
        """A revoke is broadcast: cancel ``task_ids`` in the book first, in one round trip
        ("revoked", or "terminated"); ids the book does not hold, or holds ended, are
        left alone. A book that does not answer is logged: the worker that discards the
        message records the cancel then."""
        reason = "terminated" if terminated else "revoked"
        try:
            self.flush_creates()  # a task this process just published is in the book
            book = self.book.get()
            event = CancelEvent(at_ms=book.now_ms(), reason=reason)
            items = [
                (task_id, event, callback_id(task_id, "revoke", reason)) for task_id in task_ids
            ]
            book.apply_many(items, full_task=False)
        except Exception as error:  # the revoke goes out whatever the book answered
            logger.warning(
                "asyncbook: the revoke of %s is not in the book yet (%s); the worker that "
                "discards the message records it",
                ", ".join(task_ids),
                error,
            )

    def _revoke_cancelled(self, task_id: str) -> None:
        """Cancelled in the book: this worker discards its message (Celery's revoked set),
        and a running execution stops at its next ``report_progress`` (the ring)."""
        add_to_revoked(task_id)
        ring = self.running.ring
        if ring is not None:
            ring.add(task_id)
        for request in held_requests(task_id, self.timer):
            self._store_revoked(request)

    def _store_revoked(self, request: Any) -> None:
        """A request of this worker (running, or waiting to) was cancelled in the book:
        asyncbook's result backend stores REVOKED with the cancel's reason now, as a
        revoke would when the worker discards it. Celery's own paths (an ignored task,
        a revoke of a running task) store nothing for it."""
        task = request.task
        backend = task.backend
        if not getattr(backend, "stores_book_verdicts", False) or not request.store_errors:
            return
        try:
            found = self.book.get().get(request.id)
            reason = found.error if found is not None else None
            error = TaskRevokedError(reason or "cancelled")
            backend.store_result(request.id, error, states.REVOKED, request=request._context)
        except Exception as error:  # the cancel stands: the worker's discard writes it
            logger.warning(
                "asyncbook: the REVOKED result of cancelled task %s is not stored yet: %s",
                request.id,
                error,
            )

    def stop_watching(self) -> None:
        """Stop following the book's cancels in this process."""
        watch = self.running.process.cancel_watch
        if watch is not None:
            watch.stop()

    def handlers(self) -> list[Handler]:
        """Its signal: a worker is made (before its pool forks)."""
        return [(signals.worker_init, self.on_worker_init)]
