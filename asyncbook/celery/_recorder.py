"""``Recorder``: writes a worker process's events to the book, in order, never dropping one
while it can still count.

One writer thread per process sends the queued events in order, in one round trip
(``apply_many``) per batch. ``buffer`` queues an event that waits ``flush_delay`` (each
event its own, counted from when it was queued) to share that round trip, or to be taken
by the result backend and ride with the execution's result; ``write`` queues events that
must be in the book before the message is acknowledged (the end of an ``acks_late``
task, a retry before its republish), wakes the writer and waits for them, at most
``retry_for`` seconds.

When the book does not answer, nothing is dropped: the writer keeps the events, in
order, and sends them again with backoff until the book answers (callback ids make a
resend safe). Each event keeps how to create its task from the message it ran from
(``creator_of``, asked when it is queued): if the book answers "unknown" (the
publisher's create never landed: the book was down then too), the task is created,
then its events are sent again, first, in order, even long after the execution ended.
An event is let go only when its task's deadline has passed (the book would refuse it
then anyway; the sweep has expired the task), or when more than ``max_held`` events
wait (the oldest go, logged as errors naming their tasks). Events are held in the
worker process's memory: a process that dies during an outage loses what it held, and
those tasks end by their deadline (docs/faults.md).
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .._book import ApplyItem, AsyncBook, EventInput
from .._models import CallbackResult
from ..errors import AsyncBookError, UnknownTaskError
from ..redis import EventOutcome
from ._retrying import FIRST_DELAY, MAX_DELAY, OUTAGE

__all__ = ["Recorder", "Taken"]

logger = logging.getLogger("asyncbook.celery")

_Result = TypeVar("_Result")
_REMEMBERED = 4096
_MAX_BATCH = 500
_DEADLINE_GRACE_MS = 60_000
"""How long past its deadline (by this host's clock) an event is still held: clocks differ."""
_IDLE_AFTER = 1.0
"""Seconds without an event queued after which the idle writer sleeps until woken."""


def _apply_many(book: AsyncBook, batch: Sequence[ApplyItem]) -> list[Any]:
    # The recorder reads only states and reasons: spare the book the histories.
    return list(book.apply_many(batch, full_task=False))


def _kind(event: EventInput) -> str:
    return str(event.get("type") if isinstance(event, Mapping) else event.type)


def _ends(event: EventInput) -> bool:
    return _kind(event) in ("succeed", "fail")


Answer = CallbackResult | EventOutcome | AsyncBookError | None
"""The book's answer to one event (an ``EventOutcome`` from a scripted write); None when
it did not answer."""


@dataclass(eq=False)
class _Queued:
    """One event waiting for the writer; ``done`` is set once the book answered for it."""

    item: ApplyItem
    deadline_ms: float | None
    done: threading.Event | None = None
    result: Answer = field(default=None)
    sent_again: bool = False
    """Sent once more, first, after its task was created (``create``)."""
    create: Callable[[], bool] | None = None
    """Creates its task from the message it ran from (True if it did), for a book that
    answers "unknown": taken when the event was queued, so it outlives the execution (the
    book may come back long after the task ended)."""
    rides: bool = False
    """The result backend may take it to write with the execution's result: it is sent
    only once its own ``flush_delay`` is over."""
    queued_at: float = field(default_factory=time.monotonic)


Taken = _Queued
"""An event ``Recorder.take`` handed out: ``.item`` is its (task id, event, callback id)."""


class Recorder:
    """Queues events and writes them in order from one thread; never drops a live one."""

    def __init__(
        self,
        book: Callable[[], AsyncBook],
        *,
        flush_delay: float,
        retry_for: float,
        max_held: int = 100_000,
        on_answer: Callable[[ApplyItem, Answer], None] | None = None,
        creator_of: Callable[[str], Callable[[], bool] | None] | None = None,
    ) -> None:
        self._book_factory = book
        self.on_answer = on_answer
        """Called with each event and the book's answer (in the writer thread)."""
        """Called with a task the book answered "unknown" for, when its events carry no
        ``create``; True if it created the task: the task's events of that batch are
        then sent again, once, first."""
        self.creator_of = creator_of
        """Called with the task of each event queued: how to create that task when the
        book answers "unknown" (None: not known here). Kept with the event."""
        self._book: AsyncBook | None = None
        self.flush_delay = flush_delay
        self.retry_for = retry_for
        self.max_held = max_held
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Condition()
        self._queue: deque[_Queued] = deque()
        self._urgent = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._written: OrderedDict[str, None] = OrderedDict()
        self._outage_since: float | None = None
        self._answering: set[str] = set()
        """The tasks of the batch the writer is answering: out of the queue, and those
        that met "unknown" go back to it once their task is created (``take`` waits)."""
        self._last_queued = 0.0
        self._idle_until = 0.0
        """While the writer waits for an empty queue to fill: when it looks again by
        itself (``inf``: only when woken); 0 otherwise. An event due after that needs
        no wake-up (``_enqueue``)."""

    def _check_fork(self) -> None:
        # A forked pool child inherits locks and a queue, but not the writer thread.
        if os.getpid() != self._pid:
            self._reset()

    @property
    def book(self) -> AsyncBook:
        """The book, built on first use (so a pool child builds its own connections)."""
        if self._book is None:
            self._book = self._book_factory()
        return self._book

    @property
    def held(self) -> int:
        """Events queued and not yet answered by the book."""
        return len(self._queue)

    def buffer(
        self, item: ApplyItem, *, deadline_ms: float | None = None, rides: bool = False
    ) -> None:
        """Queue a non-terminal event; it is written within ``flush_delay``.

        ``deadline_ms`` (the task's deadline, when known) lets the writer drop the event
        once the book would refuse it anyway. ``rides``: the result backend may ``take``
        it to write with the execution's result, so it is not sent with a batch before
        its own ``flush_delay`` is over (other events go with the first batch due).
        """
        self._enqueue([_Queued(item, deadline_ms, rides=rides)], urgent=False)

    def write(self, *items: ApplyItem, deadline_ms: float | None = None) -> list[Answer]:
        """Write everything queued and ``items`` now; the book's answers for ``items``.

        Waits at most ``retry_for`` seconds. An answer is None when the book did not
        answer in time: the event stays queued and is written as soon as it answers.
        """
        done = threading.Event()
        entries = [_Queued(item, deadline_ms, done) for item in items]
        self._enqueue(entries, urgent=True)
        if entries and not done.wait(self.retry_for):
            ids = ", ".join(sorted({entry.item[0] for entry in entries}))
            logger.error(
                "asyncbook: the book did not answer within %.1f s; holding the event(s) of "
                "task(s) %s until it does",
                self.retry_for,
                ids,
            )
        for item in items:
            if item[2] is not None:
                self._remember(item[2])
        return [entry.result for entry in entries]

    def flush(self) -> None:
        """Write whatever is queued now (waits at most ``retry_for``)."""
        self._check_fork()
        with self._lock:
            last = self._queue[-1] if self._queue else None
            if last is not None and last.done is None:
                last.done = threading.Event()
            self._lock.notify()  # a writer that would look again later looks now
        self._urgent.set()
        if last is not None and last.done is not None:
            last.done.wait(self.retry_for)

    def take(self, task_id: str) -> list[Taken]:
        """Remove the queued events of ``task_id`` and return them, in order, for a caller
        that writes them itself in its own round trip (asyncbook's result backend);
        it hands the book's answers to ``answer``.

        An event the writer is sending at that moment may go out twice: callback ids
        make the second a no-op.
        """
        self._check_fork()
        with self._lock:
            self._lock.wait_for(lambda: task_id not in self._answering, self.retry_for)
            if not self._queue:
                return []
            taken = [entry for entry in self._queue if entry.item[0] == task_id]
            if taken:
                self._queue = deque(entry for entry in self._queue if entry.item[0] != task_id)
        return taken

    def answer(self, taken: Sequence[Taken], results: Sequence[object]) -> None:
        """The book's answers to events ``take`` gave out (None: not written, so they are
        queued again, in order, ahead of the queue)."""
        if all(result is None for result in results):
            self._check_fork()
            with self._lock:
                self._queue.extendleft(reversed(taken))
                self._lock.notify()
            return
        self._answer(list(taken), results)

    def remember(self, callback: str) -> None:
        """Note that ``callback`` was written synchronously by someone else (the result
        backend), so ``written`` answers True for it."""
        self._remember(callback)

    def written(self, callback: str) -> bool:
        """True if this process already wrote ``callback`` synchronously."""
        return callback in self._written

    def _remember(self, callback: str) -> None:
        self._written[callback] = None
        while len(self._written) > _REMEMBERED:
            self._written.popitem(last=False)

    def close(self) -> None:
        """Write what is queued (waiting at most ``retry_for``), then stop the writer."""
        self.flush()
        self._stopping = True
        self._urgent.set()
        with self._lock:
            self._lock.notify_all()
            left = [entry.item[0] for entry in self._queue]
        thread = self._thread
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            thread.join(timeout=1.0)
        if left:
            logger.error(
                "asyncbook: stopping with %d event(s) unwritten, of task(s) %s",
                len(left),
                ", ".join(sorted(set(left))),
            )

    def _enqueue(self, entries: list[_Queued], *, urgent: bool) -> None:
        self._check_fork()
        if self.creator_of is not None:
            creators: dict[str, Callable[[], bool] | None] = {}
            for entry in entries:
                task_id = entry.item[0]
                if task_id not in creators:
                    creators[task_id] = self.creator_of(task_id)
                entry.create = creators[task_id]
        with self._lock:
            self._queue.extend(entries)
            overflow = len(self._queue) - self.max_held
            dropped = [self._queue.popleft() for _ in range(max(0, overflow))]
            if self._thread is None or not self._thread.is_alive():
                self._stopping = False
                self._thread = threading.Thread(
                    target=self._run, name="asyncbook-recorder", daemon=True
                )
                self._thread.start()
            if entries:
                # A writer that looks again by itself before the first of these is due
                # need not be woken (one wake-up per event costs more than the event).
                queued_at = self._last_queued = entries[0].queued_at
                if urgent or self._idle_until > queued_at + self.flush_delay:
                    self._lock.notify()
        if urgent:
            self._urgent.set()
        if dropped:
            _let_go(dropped, f"more than {self.max_held} events were held")

    def _run(self) -> None:
        delay = FIRST_DELAY
        while True:
            with self._lock:
                while not self._queue and not self._stopping:
                    self._wait_for_events()
                if not self._queue:
                    return
                due_at = self._queue[0].queued_at + self.flush_delay
            # Events gather for flush_delay after the oldest was queued, unless a write waits
            # or this is a resend; one that may ride with a result waits its own delay.
            waiting = self.flush_delay > 0 and not self._stopping and delay == FIRST_DELAY
            if waiting:
                self._urgent.wait(max(0.0, due_at - time.monotonic()))
            urgent = self._urgent.is_set() or not waiting or self._stopping
            self._urgent.clear()
            with self._lock:
                if urgent:
                    batch = list(self._queue)[:_MAX_BATCH]
                else:
                    batch = _due(self._queue, time.monotonic() - self.flush_delay)
            batch = self._without_expired(batch)
            if not batch:
                continue
            try:
                results = _apply_many(self.book, [entry.item for entry in batch])
            except OUTAGE as error:
                self._note_outage(batch, error, delay)
                if self._stopping:
                    return
                self._urgent.wait(delay)  # a write may find the book back: try at once
                delay = min(delay * 2, MAX_DELAY)
                continue
            except Exception:
                # A bug, not an outage: sending the same batch again would fail again.
                logger.exception("asyncbook: writing %d event(s) failed", len(batch))
                results = [None] * len(batch)
            delay = FIRST_DELAY
            if self._outage_since is not None:
                logger.warning(
                    "asyncbook: the book answers again after %.1f s; held events written",
                    time.monotonic() - self._outage_since,
                )
                self._outage_since = None
            self._settle(batch, results)

    def _wait_for_events(self) -> None:
        """Wait (holding ``_lock``) for events in an empty queue. While events keep coming
        the writer looks again every ``flush_delay`` by itself, so ``_enqueue`` need not
        wake it for an event that can wait that long; idle, it sleeps until woken."""
        now = time.monotonic()
        delay = self.flush_delay
        busy = delay > 0 and now - self._last_queued < _IDLE_AFTER
        self._idle_until = now + delay if busy else math.inf
        try:
            self._lock.wait(delay if busy else None)
        finally:
            self._idle_until = 0.0

    def _without_expired(self, batch: list[_Queued]) -> list[_Queued]:
        """``batch`` less the events whose task's deadline is well past (they are let go)."""
        now = time.time() * 1000
        late = [
            entry
            for entry in batch
            if entry.deadline_ms is not None and now > entry.deadline_ms + _DEADLINE_GRACE_MS
        ]
        if not late:
            return batch
        with self._lock:
            for entry in late:
                self._queue.remove(entry)
        _let_go(late, "their task's deadline has passed")
        return [entry for entry in batch if entry not in late]

    def _note_outage(self, batch: list[_Queued], error: BaseException, delay: float) -> None:
        if self._outage_since is None:
            self._outage_since = time.monotonic()
            ids = ", ".join(sorted({entry.item[0] for entry in batch}))
            logger.warning(
                "asyncbook: the book did not answer (%r); holding %d event(s) (tasks %s) and "
                "retrying",
                error,
                len(self._queue),
                ids,
            )
        else:
            logger.debug("asyncbook: book still unreachable, retrying in %.2f s", delay)

    def _settle(self, batch: list[_Queued], results: Sequence[Any]) -> None:
        with self._lock:
            sent = set(map(id, batch))
            # Not always the queue's head (events that may ride stay), and the overflow
            # rule may have dropped some of it.
            self._queue = deque(entry for entry in self._queue if id(entry) not in sent)
            self._answering = {entry.item[0] for entry in batch}
        try:
            self._answer(batch, results)
        finally:
            with self._lock:
                self._answering = set()
                self._lock.notify_all()

    def _answer(self, batch: list[_Queued], results: Sequence[Any]) -> None:
        again: list[_Queued] = []
        created: dict[str, bool] = {}
        for entry, result in zip(batch, results, strict=True):
            task_id, event, _ = entry.item
            if self._send_again(entry, result, created):
                again.append(entry)
                continue
            entry.result = result
            if isinstance(result, AsyncBookError):
                logger.error("asyncbook: task %s refused an event: %s", task_id, result)
            elif (
                result is not None
                and not result.changed
                and not result.duplicate_callback
                and _ends(event)
            ):
                logger.warning(
                    "asyncbook: task %s refused its %s (%s, state %s)",
                    task_id,
                    _kind(event),
                    result.reason,
                    result.state if isinstance(result, EventOutcome) else result.task.state.value,
                )
            if self.on_answer is not None:
                try:
                    self.on_answer(entry.item, result)
                except Exception:
                    logger.exception("asyncbook: on_answer failed")
            if entry.done is not None:
                entry.done.set()
        if again:
            with self._lock:
                self._queue.extendleft(reversed(again))
                self._lock.notify()

    def _send_again(self, entry: _Queued, result: Any, created: dict[str, bool]) -> bool:
        """True if ``entry`` met "unknown" and its task has just been created here: from
        the message it ran from (``entry.create``)."""
        if not isinstance(result, UnknownTaskError) or entry.sent_again:
            return False
        task_id, create = entry.item[0], entry.create
        if create is None:
            return False
        if task_id not in created:
            try:
                created[task_id] = create()
            except Exception:
                logger.exception("asyncbook: creating task %s from its message failed", task_id)
                created[task_id] = False
        entry.sent_again = created[task_id]
        return entry.sent_again


def _due(queue: deque[_Queued], queued_by: float) -> list[_Queued]:
    """What ``queue`` may send now (at most a batch, in order): everything but the events
    that may ride with a result and were queued after ``queued_by``, and the events of
    their tasks behind them."""
    held: set[str] = set()
    batch: list[_Queued] = []
    for entry in queue:
        task_id = entry.item[0]
        if task_id in held or (entry.rides and entry.queued_at > queued_by):
            held.add(task_id)
            continue
        batch.append(entry)
        if len(batch) == _MAX_BATCH:
            break
    return batch


def _let_go(entries: list[_Queued], why: str) -> None:
    lost = [(entry.item[0], entry.item[1]) for entry in entries]
    ids = ", ".join(sorted({task_id for task_id, _ in lost}))
    logger.error("asyncbook: events not recorded for task(s) %s (%s): %r", ids, why, lost)
    for entry in entries:
        if entry.done is not None:
            entry.done.set()
