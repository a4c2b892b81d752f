"""An execution of a tracked task in a worker: ``task_prerun`` starts it (buffered, with
a nonce of the execution in its callback id; claimed at once where a second delivery
may run beside it, ``_one_run``), ``report_progress`` reports on it, and
``task_postrun`` lets it go. Its record (``Execution``) says how to create its task from
its message when the book does not hold it."""

from __future__ import annotations

import functools
import os
import socket
from dataclasses import dataclass
from typing import Any

from celery import Celery, Task, signals

from .._book import AsyncBook
from .._limits import TASK_ID_LIMIT
from .._models import ProgressEvent, StartEvent
from .._output import OutputAppend
from ..errors import AsyncBookError, invalid
from ._concurrency import Limits
from ._lifecycle import Heartbeats, TaskCancelled
from ._one_run import DuplicateRun, OneRun, forget_skip
from ._publishing import CREATED_HEADER, DEADLINE_HEADER, Publishing
from ._recorder import Recorder
from ._settings import Settings
from ._state import Execution, Handler, Lazy, Running
from ._tracking import callback_id, heartbeat_timeout_ms, is_tracked, now_ms

__all__ = ["Executions", "is_mine"]


def is_mine(app: Celery, task: object, task_id: object = None) -> bool:
    """True for a tracked task of the integration's app (and an id no book refuses: at
    most ``TASK_ID_LIMIT`` characters; its publish said why it is not tracked)."""
    if isinstance(task_id, str) and len(task_id) > TASK_ID_LIMIT:
        return False
    return isinstance(task, Task) and task.app is app and is_tracked(task)


@dataclass(eq=False)
class Executions:
    """The running executions of tracked tasks in this process."""

    app: Celery
    settings: Lazy[Settings]
    book: Lazy[AsyncBook]
    recorder: Lazy[Recorder]
    running: Running
    publishing: Publishing
    one_run: OneRun
    limits: Limits | None = None

    def heartbeats(self) -> Heartbeats:
        """This process's running tracked executions, beating every interval (built on
        first use, in each process)."""
        process = self.running.process
        if process.heartbeats is None:
            interval = self.settings.get().heartbeat_interval
            process.heartbeats = Heartbeats(self.book.get, interval)
        return process.heartbeats

    def on_task_prerun(self, task_id: str | None = None, task: object = None, **_: Any) -> None:
        """A worker starts an attempt: start, buffered (created here if the publisher did not)."""
        if task_id is None or not is_mine(self.app, task, task_id):
            return
        assert isinstance(task, Task)
        request = task.request
        retries = int(request.retries or 0)
        deadline = request.get(DEADLINE_HEADER)
        settings = self.settings.get()
        timeout = heartbeat_timeout_ms(task, settings.heartbeat_timeout_ms)
        claims = timeout is not None and self.one_run.needs_claim(task, request, settings)
        execution = Execution(
            task_id=task_id,
            name=task.name,
            retries=retries,
            nonce=os.urandom(6).hex(),  # 12 hex digits, as uuid4().hex[:12] without the UUID
            deadline_ms=deadline if isinstance(deadline, int) else None,
            create=functools.partial(self.publishing.create_late, task, task_id, request),
        )
        if retries == 0 and not request.get(CREATED_HEADER):
            # Tried once: while the book is down the task runs at once, and its start,
            # held with how to create it, creates it when the book is back.
            self.publishing.create_late(task, task_id, request, once=True)
        limits = self.limits
        slot = None if limits is None else limits.request(task, task_id, timeout)
        claims = claims or slot is not None  # a slot is kept by the start's heartbeats
        worker = str(request.hostname or socket.gethostname())
        # Both values are this worker's own (an int, a str): no validation to run.
        start = StartEvent.model_construct(at_ms=now_ms(), worker=worker)
        callback = callback_id(task_id, "start", retries, execution.nonce)
        taking = None  # a limited start takes its slot in its claim's call (_concurrency)
        if limits is not None and slot is not None:
            taking = (slot, functools.partial(limits.answered, task_id, slot))
        if claims and not self.one_run.claim(
            task, task_id, worker, start.at_ms, callback, execution.create, taking
        ):
            return  # a live attempt holds the task, or it waits for a slot: skipped
        if limits is not None and slot is not None:
            limits.hold(task_id, slot)
        process = self.running.process
        with process.lock:
            process.running.setdefault(task.name, []).append(execution)
            process.executions[task_id] = execution
        if timeout is not None:
            self.heartbeats().add(task_id)
        if not claims:  # else the claim wrote it
            self.recorder.get().buffer(
                (task_id, start, callback),
                deadline_ms=execution.deadline_ms,
                rides=self.results_ride(),
            )

    def on_task_postrun(
        self, task_id: str | None = None, task: object = None, retval: object = None, **_: Any
    ) -> None:
        """The attempt is over: it no longer takes progress from other threads."""
        if task_id is None or not is_mine(self.app, task) or isinstance(retval, DuplicateRun):
            return  # a skipped delivery was never registered (the live one may run here)
        forget_skip()
        assert isinstance(task, Task)
        process = self.running.process
        with process.lock:
            running = process.running.get(task.name, [])
            for index, execution in enumerate(running):
                if execution.task_id == task_id:
                    del running[index]
                    break
            if not running:
                process.running.pop(task.name, None)
            process.executions.pop(task_id, None)
        if process.heartbeats is not None:
            process.heartbeats.discard(task_id)
        if self.limits is not None:
            self.limits.release(task_id)

    def results_ride(self) -> bool:
        """True when asyncbook's result backend writes an execution's buffered events
        with its result (so they need not be sent before it)."""
        return bool(getattr(self.app.backend, "takes_buffered_events", False))

    def create_missing(self, task_id: str) -> bool:
        """Create ``task_id``, running in this process, from its message (the book did not
        hold it: its publisher's create had not landed, or was lost). True if it did."""
        create = self.running.creator_of(task_id)
        return create is not None and create()

    def _running(self, task: Task[Any, Any], task_id: str | None) -> tuple[str, int] | None:
        """The execution of ``task`` a progress report is for (id, retries): the caller's
        own, else the one running in this process (``task_id`` picks one of several)."""
        request = task.request
        if request.id is not None and task_id in (None, request.id):
            return str(request.id), int(request.retries or 0)
        process = self.running.process
        with process.lock:
            running = list(process.running.get(task.name, ()))
        if task_id is not None:
            running = [execution for execution in running if execution.task_id == task_id]
        if len(running) > 1 and task_id is None:
            raise invalid(
                f"report_progress: {len(running)} executions of {task.name} run in this "
                "process and this thread is none of them; pass task_id=self.request.id "
                "(read in the task's own thread)",
                field="task_id",
            )
        return (running[0].task_id, running[0].retries) if running else None

    def progress(
        self, task: Task[Any, Any], percent: int, cursor: str, task_id: str | None = None
    ) -> None:
        """Record progress of the running attempt of ``task`` (buffered)."""
        found = self._live(task, task_id)
        if found is None:
            return
        running_id, retries = found
        process = self.running.process
        own = process.executions.get(running_id)
        nonce = "" if own is None else own.nonce
        event = ProgressEvent(at_ms=now_ms(), progress=percent, cursor=cursor)
        callback = callback_id(running_id, "progress", retries, percent, nonce)
        self.recorder.get().buffer(
            (running_id, event, callback),
            deadline_ms=self.running.deadline_of(running_id),
            rides=self.results_ride(),
        )

    def _live(self, task: Task[Any, Any], task_id: str | None) -> tuple[str, int] | None:
        """``_running``, raising ``TaskCancelled`` for an execution cancelled since."""
        found = self._running(task, task_id)
        if found is None:
            return None
        running_id = found[0]
        process = self.running.process
        if running_id in process.cancelled:
            raise TaskCancelled(running_id, process.cancelled[running_id])
        ring = self.running.ring
        if ring is not None and running_id in ring:
            # Cancelled in the book since it started: the main process's watch said so.
            raise TaskCancelled(running_id, None)
        return found

    def output(
        self, task: Task[Any, Any], chunks: tuple[str, ...], task_id: str | None = None
    ) -> OutputAppend | None:
        """Append ``chunks`` to the running attempt's output now (one script call). The
        attempt's start may still be buffered: a first append the book refuses for the
        task's state writes what is buffered, then goes again."""
        found = self._live(task, task_id)
        if found is None:
            return None
        book = self.recorder.get().book
        try:
            return book.append_output(found[0], *chunks)
        except AsyncBookError as error:
            if error.field != "taskId":
                raise
        self.recorder.get().flush()
        return book.append_output(found[0], *chunks)

    def handlers(self) -> list[Handler]:
        """Its signals: an attempt starts, an attempt is over."""
        prerun, postrun = signals.task_prerun, signals.task_postrun
        return [(prerun, self.on_task_prerun), (postrun, self.on_task_postrun)]
