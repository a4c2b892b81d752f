"""Lifecycle controls for a Celery user: ``cancel`` a task, read a task's ``last_cursor``,
``apply_group``; and ``Controls``, the integration's part that backs them (and follows
the book's cancels in a worker)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery import Celery, Task, chord, group, signals
from celery.result import AsyncResult, GroupResult

from .._checks import require_optional_string, require_string
from .._models import CallbackResult
from ..errors import UnknownTaskError, invalid
from ._lifecycle import CancelledRing, CancelWatch, add_to_revoked
from ._registry import installed, require_installed
from ._revoke import cancelled_here
from ._state import Handler, Shared
from ._tracking import is_tracked

__all__ = ["Controls", "apply_group", "cancel", "last_cursor"]


def cancel(
    app: Celery, task_id: str, reason: str | None = None, *, terminate: bool = False
) -> CallbackResult:
    """Cancel ``task_id``: ``cancelled`` in the book at once, then revoked in Celery.

    A queued task (or one waiting between retries) is discarded by every worker without
    running; a running one learns of it at its next ``report_progress`` (which raises
    ``TaskCancelled``), or is killed with ``terminate=True``. Returns the book's answer
    (``cancelled``, ``duplicate-cancel``, or ``terminal-conflict`` for a task that
    already ended).
    """
    require_string(task_id, "task_id")
    require_optional_string(reason, "reason")
    return require_installed(app).cancel(task_id, reason, terminate=terminate)


def last_cursor(task: Task[Any, Any]) -> str | None:
    """Inside a tracked task: the cursor it last reported, in an earlier attempt or this
    one (its checkpoint), or None when it never reported one. One round trip."""
    integration = installed(task.app)
    return None if integration is None else integration.last_cursor(task)


def apply_group(
    signature: group | chord, *args: Any, **options: Any
) -> GroupResult | AsyncResult[Any]:
    """Publish a Celery ``group`` (or a ``chord``, whose header is the group) and declare
    its size to the book first, so the book sends one group notification when the last
    tracked member ends. Returns what ``signature.apply_async`` returns.

    Members are recorded at publish by any ``group.apply_async()``; only the size needs
    this call, because Celery's publish hooks do not carry it.
    """
    app = signature.app
    integration = require_installed(app)
    if not isinstance(signature, group | chord):
        raise invalid("apply_group takes a group or a chord", field="signature")
    signature.freeze()  # fixes the group's id and its members' ids, as apply_async uses them
    header = signature.tasks if isinstance(signature, chord) else signature
    if not isinstance(header, group):
        raise invalid("apply_group takes a group or a chord", field="signature")
    members = [app.tasks.get(str(member.task)) for member in header.tasks]
    tracked = sum(1 for task in members if task is not None and is_tracked(task))
    if tracked and header.id is not None:
        integration.book.seal_group(str(header.id), tracked)
    return signature.apply_async(args, **options)


class Controls:
    """The integration's share of the lifecycle controls: cancel (in the book, then
    revoked), the cancels a worker follows, the ring its pool shares, the checkpoint."""

    def __init__(self, state: Shared, flush_creates: Callable[[], None]) -> None:
        self.state = state
        self.flush_creates = flush_creates

    def cancel(
        self, task_id: str, reason: str | None = None, *, terminate: bool = False
    ) -> CallbackResult:
        """Cancel in the book now, then revoke in Celery (every worker discards it)."""
        self.flush_creates()  # a task this process just published is in the book first
        result = self.state.book.cancel(task_id, reason)
        with cancelled_here(task_id):  # the revoke's own cancel would only repeat it
            self.state.app.control.revoke(task_id, terminate=terminate)
        return result

    def last_cursor(self, task: Task[Any, Any]) -> str | None:
        """The cursor the task last reported, in this attempt or an earlier one."""
        task_id = task.request.id
        if task_id is None:
            return None
        self.state.recorder.flush()
        try:
            return self.state.book.last_cursor(str(task_id))
        except UnknownTaskError:
            return None

    def on_worker_init(self, sender: Any = None, **_: Any) -> None:
        """A worker is made, its pool not yet forked: make the ring of cancelled tasks its
        pool processes will share."""
        state = self.state
        if getattr(sender, "app", None) is state.app and state.ring is None:
            state.ring = CancelledRing()

    def watch_cancels(self) -> None:
        """Follow the book's cancels in this (main) process, when the book publishes them."""
        state = self.state
        process = state.process
        if process.cancel_watch is not None:
            return
        watch = CancelWatch(state.book, self._revoke_cancelled)
        follow = watch.follower()
        if follow is None:
            return  # the book publishes no cancels: a running task learns at its progress
        if state.ring is None:  # no worker_init (an embedded worker): this process only
            state.ring = CancelledRing()
        process.cancel_watch = watch
        watch.start(follow)

    def _revoke_cancelled(self, task_id: str) -> None:
        """Cancelled in the book: this worker discards its message (Celery's revoked set),
        and a running execution stops at its next ``report_progress`` (the ring)."""
        add_to_revoked(task_id)
        if self.state.ring is not None:
            self.state.ring.add(task_id)

    def handlers(self) -> list[Handler]:
        """Its signal: a worker is made (before its pool forks)."""
        return [(signals.worker_init, self.on_worker_init)]
