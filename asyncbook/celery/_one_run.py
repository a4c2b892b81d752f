"""One run per task in a worker: a delivery of a tracked task whose running attempt is
alive elsewhere is acknowledged and not run (docs/one-run.md).

Redis's ``visibility_timeout`` hands a message unacknowledged for that long to another
consumer while its first one still holds it: an ``acks_late`` task running longer, or an
ETA/countdown task waiting in a worker's memory, runs twice. At its start such a delivery
claims the run (``claim_run``: one script call, the start itself): a live attempt holds
it (its heartbeat is not overdue) → the body does not run; an overdue one → ended as
the sweep would end it, and this delivery runs as the next attempt.

The claim is a round trip before the body where the start otherwise rides with the
result's write, so it is made only where a second copy of the message can exist. With
Redis, a copy exists only after the message stayed unacknowledged for the visibility
timeout. A claim is made when:

- the task is ``acks_late``: its message stays unacknowledged while it runs;
- the message has an ETA (``countdown``, ``eta``, a retry's delay): it waits unacked;
- the message was restored: kombu's Redis transport marks a restored copy
  ``redelivered`` (RabbitMQ marks its redeliveries too), and Celery passes it in
  ``request.delivery_info``;
- the message was published at least half the visibility timeout ago (its publish time
  is its deadline less its ``ttl``; an earlier ``expires`` only makes it look older), or
  when it is not known: a message prefetched by a busy worker may have waited that long,
  and its restored copy may already run elsewhere. The copy is marked, the original is not.

Otherwise (an early-acknowledged task started soon after its publish) the message is
acknowledged when it starts, long before the timeout, so no second copy can exist and
the start stays buffered. Two clocks are compared for the last rule: the publisher's and
the worker's must agree within half the timeout (an hour by default).

A claim that meets a task already ended (``terminal-conflict``) is suppressed too: its
run is over. The body is skipped by the task's ``before_start`` handler (Celery's
documented hook, set on each tracked task's class when the app is finalized and when a
worker starts), raising ``DuplicateRun``, an ``Ignore``: Celery acknowledges the message
and stores no result, so the first run's result stays as it is.

A held delivery is postponed, not dropped: a copy and a holder that died look alike from
here (a killed pool child's ``acks_late`` message comes back at once, ``redelivered``,
while the dead attempt's heartbeat is still fresh). One held claim per stall period
(``Held.postpone``) sends its message again, as ``Task.retry`` does but with the same
``retries`` and marked ``POSTPONED_HEADER``, to arrive a moment after the holder's stall
time. Its claim then finds the holder ended (dropped), alive (postponed again), or
stalled (it runs, as the stall's recovery). Held copies meanwhile are dropped: one is
already on its way. A copy that would arrive after the task's deadline is not sent: the
deadline ends the task if its holder does not.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from celery import Celery, Task, signals
from celery.exceptions import Ignore

from .._audit import AuditedBook
from .._book import AsyncBook
from .._models import CallbackResult
from .._one_run import SUPPRESS, Held
from .._reasons import Reason
from .._slots import SlotBook, SlotRequest, SlotStart
from ..errors import AsyncBookError, UnknownTaskError, invalid
from ._configured import retried
from ._handback import handed_back
from ._publishing import DEADLINE_HEADER
from ._settings import Settings
from ._startup import SettingsError
from ._state import Handler, Lazy
from ._tracking import is_tracked, now_ms, ttl_ms

__all__ = ["DuplicateRun", "OneRun", "forget_skip", "one_run_option", "skip"]

logger = logging.getLogger("asyncbook.celery")

DEFAULT_VISIBILITY_TIMEOUT_MS = 3_600_000
"""kombu's Redis transport's ``visibility_timeout`` when the app sets none (1 h)."""
POSTPONE_MARGIN_MS = 1_000
"""How long after the holder's stall time a postponed delivery arrives: the worker's and
the book's clocks may differ by this much (a little early, it is postponed once more)."""


class DuplicateRun(Ignore):
    """Raised before the body of a delivery whose task another live attempt holds (or
    whose run is over): Celery acknowledges its message and stores no result."""

    def __init__(self, task_id: str, reason: str) -> None:
        super().__init__(task_id, reason)  # pickles from its args (prefork)
        self.task_id = task_id
        self.reason = reason

    def __str__(self) -> str:
        return f"task {self.task_id} not run again: {self.reason}"


def one_run_option(task: object, default: bool) -> bool:
    """The task's ``one_run`` option (True, False), or ``default`` when it sets none."""
    value = getattr(task, "one_run", None)
    if value is None:
        return default
    if not isinstance(value, bool):
        name = getattr(task, "name", "?")
        raise invalid(f"one_run of task {name} must be True or False", field="one_run")
    return value


class _Skip(threading.local):
    """The delivery this thread is about to skip (``prerun`` to ``before_start``)."""

    skip: DuplicateRun | None = None


_SKIP = _Skip()
_HOOKED = "_asyncbook_one_run"


def _hook(cls: type[Task[Any, Any]]) -> None:
    """Give a tracked task's class a ``before_start`` that raises a skip noted for this
    thread, then runs the class's own (once per class)."""
    if cls.__dict__.get(_HOOKED):
        return
    own = cls.before_start

    def before_start(self: Task[Any, Any], task_id: str, args: Any, kwargs: Any) -> Any:
        """Skip this delivery if its claim said so; then the task's own handler."""
        skip, _SKIP.skip = _SKIP.skip, None
        if skip is not None and skip.task_id == task_id:
            raise skip
        return own(self, task_id, args, kwargs)

    # Not wrapped with functools.wraps: Celery calls a handler whose module is not its own
    # (``task_has_custom``), and the wrapped one's is.
    cls.before_start = before_start  # type: ignore[method-assign]
    setattr(cls, _HOOKED, True)


def skip(error: DuplicateRun) -> None:
    """Skip this thread's delivery of ``error.task_id``: its ``before_start`` raises it."""
    _SKIP.skip = error


def forget_skip() -> None:
    """Drop a skip no ``before_start`` took (a task traced without the hook, eagerly)."""
    _SKIP.skip = None


@dataclass(eq=False)
class OneRun:
    """The claim of a tracked task's run at its start, and the hooks that skip a body."""

    app: Celery
    settings: Lazy[Settings]
    book: Lazy[AsyncBook]

    def hook_tracked(self, check: bool = False) -> None:
        """Hook every tracked task of the app (with ``check``, its ``one_run`` option
        checked: a bad one refuses the worker's start, ``SettingsError``)."""
        try:
            default = self.settings.get().one_run if check else True
            for task in list(self.app.tasks.values()):
                if isinstance(task, Task) and is_tracked(task):
                    if check:
                        one_run_option(task, default)
                    _hook(type(task))
        except AsyncBookError as error:
            raise SettingsError.of(error) from None

    def on_after_finalize(self, sender: object = None, **_: Any) -> None:
        if sender is self.app:
            self.hook_tracked()

    def on_worker_init(self, sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is self.app:
            self.hook_tracked(check=True)

    def needs_claim(self, task: Task[Any, Any], request: Any, settings: Settings) -> bool:
        """Whether a second copy of this delivery's message may exist (the module's rules)."""
        if not one_run_option(task, settings.one_run):
            return False
        if task.acks_late or request.eta is not None:
            return True
        if (request.delivery_info or {}).get("redelivered"):
            return True
        deadline = request.get(DEADLINE_HEADER)
        if not isinstance(deadline, int | float) or isinstance(deadline, bool):
            return True
        published = deadline - ttl_ms(task, settings.default_ttl_ms)
        return now_ms() - published >= self.visibility_timeout_ms / 2

    @functools.cached_property
    def visibility_timeout_ms(self) -> float:
        """The broker's ``visibility_timeout`` (read once: a worker's broker is fixed)."""
        options = self.app.conf.broker_transport_options or {}
        seconds = options.get("visibility_timeout") if isinstance(options, dict) else None
        if isinstance(seconds, int | float) and not isinstance(seconds, bool) and seconds > 0:
            return seconds * 1000
        return DEFAULT_VISIBILITY_TIMEOUT_MS

    def claim(
        self,
        task: Task[Any, Any],
        task_id: str,
        worker: str,
        at_ms: int | float,
        callback: str,
        create: Callable[[], object],
        slot: tuple[SlotRequest, Callable[[SlotStart], bool]] | None = None,
    ) -> bool:
        """Claim the run: True to run the body (started, or the book did not answer:
        then the start is written with the result as usual), False when this delivery is
        skipped (``before_start`` raises ``DuplicateRun``; a held one is postponed).
        With ``slot`` (a limited start: its request, and what reads the slot's answer,
        False when the task waits for it) the slot is taken in the claim's call."""
        book = self.book.get()

        def once() -> CallbackResult | Held | SlotStart:
            if slot is None or not isinstance(book, SlotBook):
                return book.claim_run(task_id, worker, at_ms=at_ms, callback_id=callback)
            return book.claim_run_in_slot(
                task_id, worker, slot[0], at_ms=at_ms, callback_id=callback
            )

        def call() -> tuple[CallbackResult | Held | SlotStart]:
            try:
                return (once(),)
            except UnknownTaskError:  # its publisher's create has not landed: create it
                create()
                return (once(),)

        answered = retried(self.settings.get(), call, task_id, "claiming the run of", "claimed")
        if answered is None:
            return True
        (result,) = answered
        if isinstance(result, SlotStart):
            assert slot is not None
            if not slot[1](result) or result.result is None:
                return False  # it waits for a slot
            result = result.result
        if isinstance(result, Held):
            why = "a live attempt holds it"
            if result.postpone:
                why += self._postpone(task, result)
        elif result.reason == Reason.TERMINAL_CONFLICT:
            why = f"it already ended ({result.task.state.value})"
            self._audit(book, task_id, worker, why, result.reason)
        else:
            return True
        logger.info("asyncbook: task %s delivered again and not run: %s", task_id, why)
        _SKIP.skip = DuplicateRun(task_id, why)
        return False

    def _postpone(self, task: Task[Any, Any], held: Held) -> str:
        """Send this delivery's message again, due after the holder's stall time (the
        module's rules); what became of it, for the log."""
        request = task.request
        countdown_ms = max(0, held.stall_at_ms - held.now_ms) + POSTPONE_MARGIN_MS
        deadline = request.get(DEADLINE_HEADER)
        if isinstance(deadline, int | float) and now_ms() + countdown_ms >= deadline:
            return "; not postponed past its deadline"
        signature = handed_back(task, countdown_ms / 1000)
        try:
            signature.apply_async()
        except Exception as error:  # the broker refused it: held copies may come again
            logger.error("asyncbook: task %s not postponed: %r", request.id, error)
            return "; not postponed (the broker refused it)"
        return f"; postponed by {countdown_ms / 1000:.1f} s"

    def _audit(self, book: AsyncBook, task_id: str, worker: str, why: str, outcome: str) -> None:
        if isinstance(book, AuditedBook):
            retried(
                self.settings.get(),
                lambda: book.record_audit(task_id, SUPPRESS, worker, why, outcome),
                task_id,
                "auditing",
                "audited",
            )

    def handlers(self) -> list[Handler]:
        """Its signals: the app is finalized, a worker is made (hook the tracked tasks)."""
        return [
            (self.app.on_after_finalize, self.on_after_finalize),
            (signals.worker_init, self.on_worker_init),
        ]
