"""What is built late, and what one process knows: ``Lazy`` and ``Running``.

``install(app)`` builds every part at once, but some of what they use cannot be built
then: the settings (an app may be configured after ``install``), the book and the
recorder made from them, a sink or ``asyncbook_result_ref`` callable (defined further
down the module that calls ``install``). Each of those is one ``Lazy``, built on first
use, by one thread, and handed to the parts that use it. ``Running`` is this process's
executions (``Execution``) and what it learnt of cancels: a forked pool child starts
afresh.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from .._book import ApplyItem
from .._models import AsyncState, AsyncTask, CallbackResult
from ..redis import EventOutcome
from ._lifecycle import CancelledRing, CancelWatch, Heartbeats

__all__ = ["REMEMBERED", "Execution", "Handler", "Lazy", "ProcessState", "Running"]

REMEMBERED = 4096
"""Failures (and cancels) a process remembers, per task id, before the oldest go."""

_T = TypeVar("_T")

Handler = tuple[Any, Callable[..., None]]
"""A Celery signal (or the app's ``on_after_configure``) and the handler to connect to it."""


class Lazy(Generic[_T]):
    """A value built by ``build`` when first asked for, by one thread (the others wait);
    a forked child does not inherit a held lock."""

    def __init__(self, build: Callable[[], _T]) -> None:
        self._build = build
        self._box: list[_T] = []
        self._pid = os.getpid()
        self._lock = threading.RLock()

    @classmethod
    def ready(cls, value: _T) -> Lazy[_T]:
        """A value already built."""
        lazy = cls(lambda: value)
        lazy._box.append(value)
        return lazy

    def get(self) -> _T:
        """The value, built now if it was not yet."""
        if not self._box:
            if os.getpid() != self._pid:  # a forked child may inherit a held lock
                self._pid, self._lock = os.getpid(), threading.RLock()
            with self._lock:
                if not self._box:
                    self._box.append(self._build())
        return self._box[0]

    def built(self) -> _T | None:
        """The value if it was built, else None (nothing is built)."""
        return self._box[0] if self._box else None


@dataclass(frozen=True)
class Execution:
    """One execution of a tracked task running in this process (prerun to postrun)."""

    task_id: str
    name: str
    """The task's name: ``report_progress`` from another thread finds it by its task."""
    retries: int
    nonce: str
    """In its start and progress callback ids: a redelivered execution (after a stall)
    starts a new attempt instead of repeating the old one."""
    deadline_ms: int | None
    """Its task's deadline, when the message says."""
    create: Callable[[], AsyncTask | None]
    """Creates its task from its message (when the publisher's create did not land)."""


@dataclass
class ProcessState:
    """What one process knows; a forked pool child starts afresh (``Running.process``)."""

    pid: int = field(default_factory=os.getpid)
    lock: threading.Lock = field(default_factory=threading.Lock)
    executions: dict[str, Execution] = field(default_factory=dict)
    """The executions running here, by task id."""
    running: dict[str, list[Execution]] = field(default_factory=dict)
    """The same, by task name."""
    failures: OrderedDict[str, int | str] = field(default_factory=OrderedDict)
    """The executions whose failure this process recorded (task id -> retries)."""
    cancelled: OrderedDict[str, str | None] = field(default_factory=OrderedDict)
    """Tasks the book answered "cancelled" for (their next report_progress raises)."""
    heartbeats: Heartbeats | None = None
    cancel_watch: CancelWatch | None = None


class Running:
    """This process's executions and the cancels it learnt, from the book's answers and
    from the ring its worker's main process fills."""

    def __init__(self) -> None:
        self.ring: CancelledRing | None = None
        """Shared with the pool processes forked after worker_init: not reset in them."""
        self._process = ProcessState()

    @property
    def process(self) -> ProcessState:
        """This process's state (a forked child's own, not its parent's)."""
        if os.getpid() != self._process.pid:
            self._process = ProcessState()
        return self._process

    def remember(self, known: OrderedDict[str, Any], task_id: str, value: Any) -> None:
        """``known[task_id] = value``, the oldest forgotten past ``REMEMBERED`` (under the
        process lock)."""
        known[task_id] = value
        while len(known) > REMEMBERED:
            known.popitem(last=False)

    def note_answer(self, item: ApplyItem, result: Any) -> None:
        """The book's answer to an event this process sent: learn of a cancel."""
        if isinstance(result, CallbackResult):
            book_state, error = result.task.state.value, result.task.error
        elif isinstance(result, EventOutcome):
            book_state, error = result.state, result.error
        else:
            return
        if book_state == AsyncState.CANCELLED.value:
            process = self.process
            with process.lock:
                self.remember(process.cancelled, item[0], error)

    def creator_of(self, task_id: str) -> Callable[[], bool] | None:
        """How to create ``task_id`` from its message, while it runs in this process (True
        if it did); None if it does not run here. The recorder keeps it with each of the
        task's events, so it still works once the execution is over."""
        execution = self.process.executions.get(task_id)
        if execution is None:
            return None
        create = execution.create
        return lambda: create() is not None

    def deadline_of(self, task_id: str) -> int | None:
        """The deadline of ``task_id``'s execution here, when known."""
        execution = self.process.executions.get(task_id)
        return None if execution is None else execution.deadline_ms
