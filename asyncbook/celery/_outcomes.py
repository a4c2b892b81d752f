"""How an attempt ended, into the book: ``task_success`` succeeds, ``task_retry`` fails
retryable, ``task_failure`` fails (once per execution), ``task_revoked`` expires or
cancels. asyncbook's result backend may have written the end already, with Celery's
meta (``backend_wrote``): the handler then writes nothing more."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from celery import Celery, Task, signals

from .._book import AsyncBook
from .._models import AsyncTransition, CancelEvent, FailEvent, SucceedEvent
from ._configured import retried
from ._execution import is_mine
from ._info import InfoPolicy
from ._recorder import Recorder
from ._result_ref import ResultRef
from ._settings import Settings
from ._state import Handler, Lazy, Running
from ._tracking import callback_id, describe_error, now_ms, result_hash

__all__ = ["Outcomes"]

logger = logging.getLogger("asyncbook.celery")


@dataclass(eq=False)
class Outcomes:
    """The end of each attempt, written to the book."""

    app: Celery
    settings: Lazy[Settings]
    book: Lazy[AsyncBook]
    recorder: Lazy[Recorder]
    running: Running
    info_policy: Lazy[InfoPolicy]
    result_ref: Lazy[ResultRef]

    def on_task_success(self, sender: object = None, result: Any = None, **_: Any) -> None:
        """The attempt returned: succeed (with acks_late, written before the ack)."""
        if not is_mine(self.app, sender, getattr(getattr(sender, "request", None), "id", None)):
            return
        assert isinstance(sender, Task)
        request = sender.request
        task_id = request.id
        if task_id is None:
            return
        callback = callback_id(task_id, "success", int(request.retries or 0))
        if self.recorder.get().written(callback):
            return  # asyncbook's result backend wrote it, with Celery's meta
        event = SucceedEvent(
            at_ms=now_ms(),
            result_ref=self.result_ref.get()(sender, task_id, result),
            result_hash=result_hash(result),
        )
        self._finish(sender, task_id, event, callback)

    def on_task_retry(
        self, sender: object = None, request: Any = None, reason: Any = None, **_: Any
    ) -> None:
        """The attempt asked for a retry: fail, retryable (requeued while attempts remain)."""
        if request is None or not is_mine(self.app, sender, getattr(request, "id", None)):
            return
        task_id = str(request.id)
        callback = callback_id(task_id, "retry", int(request.retries or 0))
        if self.recorder.get().written(callback):
            return
        error = describe_error(getattr(reason, "exc", None) or reason)
        self._write(task_id, FailEvent(at_ms=now_ms(), error=error, retryable=True), callback)

    def on_task_failure(
        self,
        sender: object = None,
        task_id: str | None = None,
        exception: BaseException | None = None,
        einfo: Any = None,
        **_: Any,
    ) -> None:
        """The attempt raised (retries exhausted included): fail, not retryable."""
        if task_id is None or not is_mine(self.app, sender, task_id):
            return
        assert isinstance(sender, Task)
        request = sender.request
        # In the worker's main process (a lost pool child) there is no request context.
        retries: int | str = int(request.retries or 0) if request.id == task_id else "lost"
        callback = callback_id(task_id, "failure", retries)
        if self.recorder.get().written(callback):
            return  # asyncbook's result backend wrote it, with Celery's meta
        if self.failed_before(task_id, retries):
            # A hard time limit sends task_failure twice (once with the request, once
            # from the timeout handler without it): the second is the same failure.
            logger.debug("asyncbook: task %s: the same failure again, ignored", task_id)
            return
        event = FailEvent(at_ms=now_ms(), error=describe_error(exception), retryable=False)
        traceback = getattr(einfo, "traceback", None)
        policy = self.info_policy.get()
        self._finish(sender, task_id, policy.failure_event(event, exception, traceback), callback)

    def on_task_revoked(
        self,
        sender: object = None,
        request: Any = None,
        expired: bool = False,
        terminated: bool = False,
        **_: Any,
    ) -> None:
        """Revoked: expire if the message expired, else cancel (queued, between retries,
        or running with ``terminate``)."""
        if request is None or not is_mine(self.app, sender, getattr(request, "id", None)):
            return
        task_id = str(request.id)
        retries = int(getattr(request, "retries", 0) or 0)
        if self.recorder.get().written(callback_id(task_id, "revoked", retries)):
            return  # asyncbook's result backend wrote it, with Celery's meta
        if expired:
            self.expire(task_id)
            return
        event = CancelEvent(at_ms=now_ms(), reason="terminated" if terminated else "revoked")
        self._write(task_id, event, callback_id(task_id, "revoked", retries))

    def backend_wrote(self, task_id: str, signal: str, retries: int) -> None:
        """asyncbook's result backend wrote this execution's ``signal`` event (success,
        failure, retry) with Celery's meta: its signal handler writes nothing more."""
        self.recorder.get().remember(callback_id(task_id, signal, retries))
        if signal == "failure":
            # A hard time limit's second task_failure (without the request) is the same.
            self.failed_before(task_id, retries)

    def failed_before(self, task_id: str, retries: int | str) -> bool:
        """True if this process already recorded this execution's failure; remembers it."""
        process = self.running.process
        with process.lock:
            before = process.failures.get(task_id)
            if before is not None and (before == retries or "lost" in (before, retries)):
                return True
            self.running.remember(process.failures, task_id, retries)
        return False

    def expire(self, task_id: str) -> AsyncTransition | None:
        """Expire ``task_id`` at its deadline now (its message expired unrun), retried
        while the book is unreachable; None if it could not be."""
        book = self.book
        return retried(
            self.settings.get(), lambda: book.get().expire(task_id), task_id, "expiring", "expired"
        )

    def _write(self, task_id: str, event: Any, callback: str) -> None:
        self.recorder.get().write((task_id, event, callback))

    def _finish(self, task: Task[Any, Any], task_id: str, event: Any, callback: str) -> None:
        # acks_late: the message is acknowledged after this handler, so the event must be
        # in the book first. Early ack: the message is gone already; the event rides with
        # the next background flush (within flush_delay), shared with other executions.
        if task.acks_late:
            self._write(task_id, event, callback)
        else:
            self.recorder.get().buffer((task_id, event, callback))

    def handlers(self) -> list[Handler]:
        """Its signals: each way an attempt ends."""
        return [
            (signals.task_success, self.on_task_success),
            (signals.task_retry, self.on_task_retry),
            (signals.task_failure, self.on_task_failure),
            (signals.task_revoked, self.on_task_revoked),
        ]
