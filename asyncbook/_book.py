"""The ``AsyncBook`` protocol every book satisfies (in memory, in Redis)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import (
    TYPE_CHECKING,
    Any,
    NamedTuple,
    Protocol,
    Required,
    TypedDict,
    Unpack,
    runtime_checkable,
)

from ._console import PublishInfo
from ._jsrules import utf16_key
from ._models import (
    AsyncEvent,
    AsyncTask,
    AsyncTransition,
    CallbackResult,
    DeliveryResult,
    GroupNotification,
    GroupSummary,
    Notification,
    ResumeResult,
    TaskPage,
)
from ._output import OutputAppend, OutputPage
from .errors import AsyncBookError

if TYPE_CHECKING:
    from ._held import Held

__all__ = [
    "ApplyItem",
    "AsyncBook",
    "CreateOptions",
    "CreateSending",
    "CreateSpec",
    "EventInput",
    "EventsScript",
    "HeldWrites",
    "ScriptedAnswer",
    "ScriptedWrite",
    "cancel_input",
    "sort_notifications",
]

EventInput = AsyncEvent | Mapping[str, Any]
"""An event model, or the same event in wire format (camelCase keys)."""
ApplyItem = tuple[str, EventInput, str | None]
"""One ``apply`` call: task id, event, callback id."""


class CreateOptions(TypedDict, total=False):
    """``create``'s keywords: ``CreateSpec``'s fields (the last five may be left out)."""

    id: Required[str]
    now_ms: Required[int | float]
    ttl_ms: Required[int | float]
    max_attempts: Required[int]
    exist_ok: bool
    heartbeat_timeout_ms: int | None
    retry_on_stall: bool
    group_id: str | None
    info: PublishInfo | None


class CreateSpec(NamedTuple):
    """One ``create`` call's arguments (``RedisBook.create_many`` takes many)."""

    id: str
    now_ms: int | float
    ttl_ms: int | float
    max_attempts: int
    exist_ok: bool = False
    heartbeat_timeout_ms: int | None = None
    retry_on_stall: bool = False
    group_id: str | None = None
    info: PublishInfo | None = None
    """What the publisher knows of the task (name, args, queue ...), for the console."""


def cancel_input(at_ms: Any, reason: Any) -> EventInput:
    """The wire form of a ``cancel`` event, so a bad ``reason`` or ``at_ms`` gets the
    usual error naming the field."""
    event: dict[str, Any] = {"type": "cancel", "atMs": at_ms}
    if reason is not None:
        event["reason"] = reason
    return event


def sort_notifications(notifications: list[Notification]) -> list[Notification]:
    """The reference's drain order: task id by UTF-16 code units, then time (stable)."""
    return sorted(notifications, key=lambda note: (utf16_key(note.task_id), note.at_ms))


@runtime_checkable
class AsyncBook(Protocol):
    """A store of tasks with callback de-duplication, an outbox, resume and delivery."""

    retention_versions: int

    def create(self, **options: Unpack[CreateOptions]) -> AsyncTask:
        """Store a new queued task; an existing id is ``conflict`` unless ``exist_ok``.

        The keywords are ``CreateSpec``'s fields: ``id``, ``now_ms``, ``ttl_ms``,
        ``max_attempts``, then optionally ``exist_ok``, ``heartbeat_timeout_ms``,
        ``retry_on_stall``, ``group_id`` and ``info`` (an unknown one is a ``TypeError``).
        With ``heartbeat_timeout_ms`` (extension) a running attempt that sends no
        heartbeat, start or progress for that long is ended by ``end_stalled``: with a
        ``fail`` whose error starts with "stalled", retryable when ``retry_on_stall``.
        With ``group_id`` (extension) the task is counted as a member of that group.
        ``info`` is what the operator console shows of the task (RedisBook keeps it).
        """
        ...

    def get(self, id: str) -> AsyncTask | None:
        """The stored task, or None."""
        ...

    def apply(
        self, task_id: str, event: EventInput, callback_id: str | None = None
    ) -> CallbackResult:
        """Apply one event; a callback id already recorded changes nothing."""
        ...

    def expire(self, task_id: str) -> AsyncTransition:
        """Expire the task at its deadline, as the sweep does."""
        ...

    def cancel(
        self,
        task_id: str,
        reason: str | None = None,
        *,
        at_ms: int | float | None = None,
        callback_id: str | None = None,
        actor: str | None = None,
    ) -> CallbackResult:
        """Cancel a queued or running task (extension): ``apply`` of a ``cancel`` event.

        ``at_ms`` defaults to the book's clock; a cancel at or after the deadline expires
        the task instead, as any event would. With ``actor`` (who asked: ``cli:ann``,
        ``token:operator``...) the cancel is audited: an ``AuditEntry`` with the reason and
        the answer, written with the cancel (``audit`` reads them).
        """
        ...

    def resume(self, task_id: str, cursor_version: int, *, full_task: bool = True) -> ResumeResult:
        """What changed after ``cursor_version``: caught-up, a delta, or a snapshot.

        With ``full_task=False`` a caught-up or delta answer carries the task without its
        history (a snapshot always carries it).
        """
        ...

    def deliver_result(
        self, task_id: str, idempotency_key: str, now_ms: int | float
    ) -> DeliveryResult:
        """Hand the result over once per idempotency key."""
        ...

    def drain_notifications(self) -> list[Notification]:
        """Every pending notification, sorted by task id then time; empties the outbox."""
        ...

    def apply_many(
        self, items: Iterable[ApplyItem], *, full_task: bool = True
    ) -> list[CallbackResult | AsyncBookError]:
        """Apply many events, each atomic on its own; errors are returned in place.

        With ``full_task=False`` each result's task comes without its history.
        """
        ...

    def expire_many(
        self, task_ids: Iterable[str], *, full_task: bool = True
    ) -> list[AsyncTransition | AsyncBookError]:
        """Expire many tasks at their deadlines; errors are returned in place."""
        ...

    def overdue(self, now_ms: int | float, limit: int = 1000) -> list[str]:
        """Ids of live tasks whose deadline is at or before ``now_ms``, earliest first."""
        ...

    def overdue_count(self, now_ms: int | float) -> int:
        """How many live tasks have a deadline at or before ``now_ms``."""
        ...

    def record_sweep(self, at_ms: int | float) -> None:
        """Note that a sweep ran at ``at_ms`` (the book's clock); the sweep calls it."""
        ...

    def last_sweep_ms(self) -> int | None:
        """When a sweep last ran (``record_sweep``), or None if none ever did."""
        ...

    def list_tasks(
        self,
        state: str | None = None,
        limit: int = 50,
        after: str | None = None,
        *,
        full_task: bool = True,
    ) -> TaskPage:
        """Tasks, newest first, optionally in one state; ``after`` continues a page.

        With ``full_task=False`` the listed tasks come without their histories.
        """
        ...

    def heartbeat(self, task_ids: Iterable[str]) -> int:
        """Say that these tasks' running attempts are alive (no version bump, no history).

        Returns how many were running with a heartbeat timeout. One round trip.
        """
        ...

    def end_stalled(
        self, now_ms: int | float | None = None, limit: int = 1000
    ) -> list[CallbackResult | AsyncBookError]:
        """Fail every running task whose heartbeat is overdue at ``now_ms`` (the book's
        clock by default); each with a callback id, so two sweeps fail it once."""
        ...

    def claim_run(
        self,
        task_id: str,
        worker: str,
        *,
        at_ms: int | float | None = None,
        callback_id: str | None = None,
    ) -> CallbackResult | Held:
        """Start the task unless a live attempt holds it (one run per task, extension).

        ``Held`` when it is running and its heartbeat is not overdue: the record does not
        change, the audit gets an entry (action ``suppress``, outcome ``held``, actor
        ``worker``), and ``Held.postpone`` says whether this delivery is the one to send
        again (due after the holder's stall time). A running attempt whose heartbeat is
        overdue is first ended as ``end_stalled`` would end it, retryable (this claim is
        its redelivery).
        Otherwise exactly ``apply`` of ``{type: "start", atMs, worker}`` with
        ``callback_id``; ``at_ms`` defaults to the book's clock.
        """
        ...

    def last_cursor(self, task_id: str) -> str | None:
        """The cursor of the last progress the task reported (a checkpoint), or None."""
        ...

    def append_output(self, task_id: str, *chunks: str) -> OutputAppend:
        """Append chunks to a running task's output stream, each labelled with the task's
        attempt (``asyncbook._output`` has the bounds); a refused append writes nothing."""
        ...

    def output(self, task_id: str, cursor: int | str = 0, limit: int = 1000) -> OutputPage:
        """Up to ``limit`` chunks of the task's output after ``cursor`` (0: from the first)."""
        ...

    def seal_group(self, group_id: str, total: int) -> GroupSummary:
        """Declare the group's size: once that many members ended, one group notification."""
        ...

    def group(self, group_id: str) -> GroupSummary | None:
        """The group's counts by state and mean progress, in O(1); None if unknown."""
        ...

    def group_members(self, group_id: str, limit: int = 100) -> list[AsyncTask]:
        """The group's members in creation order, without histories."""
        ...

    def drain_group_notifications(self) -> list[GroupNotification]:
        """Every pending group notification, in order; empties them."""
        ...

    def now_ms(self) -> int:
        """The book's clock, in ms since the epoch: what the book decides deadlines by."""
        ...

    def count_by_state(self) -> dict[str, int]:
        """How many tasks the book holds in each of the five states."""
        ...

    def transition_counts(self) -> dict[str, int]:
        """How many times each reason was answered (``duplicate-callback`` included)."""
        ...

    # -- capabilities: what some books can do; None (or nothing done) where one cannot ----

    def create_many(self, specs: Iterable[CreateSpec]) -> list[AsyncTask | AsyncBookError]:
        """``create`` for each spec (each atomic on its own); errors in place."""
        ...

    def create_sender(self) -> CreateSending | None:
        """Creates written at once and answered later (a RedisBook), or None: this book
        creates only by waiting for ``create``."""
        ...

    def wait_for_writes(self, writes: HeldWrites) -> None:
        """A book of this one's namespace in this process waits for ``writes`` (creates
        sent behind the caller's back) before it reads or applies; nothing to wait for
        in a book without a ``create_sender``."""
        ...

    def watch_cancels(
        self,
        on_cancel: Callable[[str], None],
        *,
        on_subscribe: Callable[[], None],
        stop: Callable[[], bool],
    ) -> Callable[[], None] | None:
        """A loop to run in a thread: ``on_cancel(task_id)`` for each task cancelled in
        the book, until ``stop()``; ``on_subscribe()`` after every (re)subscribe (what
        was published while nobody listened is lost). None: this book publishes none."""
        ...

    def async_twin(self) -> object | None:
        """A new asyncio book on the same store (same server, namespace, retention), to
        close when done (a RedisBook's ``AsyncRedisBook``); None when there is none."""
        ...

    def script_beside(self, client: object, source: str) -> EventsScript | None:
        """The caller's Lua ``source``, run with this book's events in one script call,
        when the book lives on the Redis server ``client`` talks to; None otherwise."""
        ...


# -- what the capabilities hand out ---------------------------------------------------


class CreateSending(Protocol):
    """Creates written without waiting for their answers (``AsyncBook.create_sender``)."""

    def send(self, spec: CreateSpec) -> None:
        """Write one create; raises ``BookUnavailableError`` when it could not."""
        ...

    def pending(self) -> bool:
        """True while creates were written and their answers not read."""
        ...

    def collect(self) -> None:
        """Read every answer still due."""
        ...

    def settle(self) -> None:
        """Read the answers already here, without waiting (a create Redis did not run for
        want of its script is sent again), and cover the creates with a ``WAIT`` if due."""
        ...

    def close(self) -> None:
        """Read what is due, then close the connection."""
        ...

    def take_unanswered(self) -> list[CreateSpec]:
        """The creates whose answers were lost (to send again)."""
        ...


class HeldWrites(Protocol):
    """Writes held for a book's namespace (``AsyncBook.wait_for_writes``)."""

    def pending(self) -> bool:
        """True while writes are unanswered, queued or being sent."""
        ...

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until they are sent."""
        ...


class ScriptedWrite(NamedTuple):
    """One call of an ``EventsScript``: one task's events and the script's own inputs."""

    task_id: str
    items: Sequence[tuple[EventInput | None, str | None]]
    """(event, callback id) each; an event None expires the task at its deadline."""
    key: str
    """The script's own key (on the book's server)."""
    args: Sequence[str]
    """The script's own ARGV, before the events'."""
    name: str | None = None
    """The task's name, when the caller knows it (saves a round trip)."""
    group_id: str | None = None
    """The task's group, likewise."""


class ScriptedAnswer(Protocol):
    """What an ``EventsScript`` answered."""

    @property
    def status(self) -> str:
        """The script's own status."""
        ...

    @property
    def state(self) -> str:
        """The task's state after the events ('' when the book does not hold it)."""
        ...

    @property
    def outcomes(self) -> Sequence[object]:
        """One per event: the book's answer, or the error the event met."""
        ...


class EventsScript(Protocol):
    """A caller's script run with one task's events (``AsyncBook.script_beside``)."""

    @property
    def retention(self) -> timedelta | None:
        """How long the book keeps an ended task's record (None: for ever)."""
        ...

    def apply(self, write: ScriptedWrite) -> ScriptedAnswer:
        """The write's events and the script, in one call."""
        ...

    def sender(self) -> ScriptedSending | None:
        """Its calls written without waiting for their answers (None: each waits)."""
        ...


class ScriptedSending(Protocol):
    """An ``EventsScript``'s calls written at once, answered later (``EventsScript.sender``);
    its owner holds a lock around it."""

    def __len__(self) -> int:
        """How many answers are not yet read."""
        ...

    def send(self, write: ScriptedWrite, token: Any) -> bool:
        """Write ``write``'s call; False when it could not (an outage)."""
        ...

    def read(self, *, block: bool, keep: int = 0) -> list[tuple[Any, Any]]:
        """(token, answer) in order: a ``ScriptedAnswer``, the error met, or an error
        saying the connection lost it (to write again)."""
        ...
