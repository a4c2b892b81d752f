"""Notification delivery: read the outbox at least once, hand each entry to the sinks.

An entry is acknowledged only when every sink took it; otherwise it stays pending and
is claimed again later (by this or another consumer). An entry a sink never can take
(``PermanentSinkError``: the request cannot even be made) is acknowledged too, with an
error naming it: retrying it every minute for ever would change nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ._book import AsyncBook
from ._models import AnyNotification, GroupNotification
from ._sinks import PermanentSinkError

__all__ = [
    "DeliveryReport",
    "DrainSource",
    "GroupNotificationSource",
    "NotificationSource",
    "deliver_notifications",
    "group_notification_source",
    "notification_source",
]

logger = logging.getLogger("asyncbook.sinks")


@runtime_checkable
class NotificationSource(Protocol):
    """An outbox read through a consumer group, with acknowledgement (``RedisBook``)."""

    def consume_notifications(
        self,
        group: str,
        consumer: str,
        count: int = 100,
        block_ms: int | None = None,
        min_idle_ms: int = 60_000,
    ) -> Sequence[tuple[str, AnyNotification]]:
        """Unacknowledged entries: first those idle for ``min_idle_ms``, then new ones."""
        ...

    def ack(self, group: str, *entry_ids: str) -> int:
        """Acknowledge handled entries."""
        ...


class DrainSource:
    """A ``NotificationSource`` over a book that can only drain (``MemoryBook``).

    Entries live in this object until acknowledged: at least once within one process.
    """

    def __init__(
        self, book: AsyncBook, drain: Callable[[], Sequence[AnyNotification]] | None = None
    ) -> None:
        self.book = book
        self._drain = drain or book.drain_notifications
        self._pending: dict[str, AnyNotification] = {}
        self._next = 0

    def consume_notifications(
        self,
        group: str,
        consumer: str,
        count: int = 100,
        block_ms: int | None = None,
        min_idle_ms: int = 60_000,
    ) -> list[tuple[str, AnyNotification]]:
        """Pending entries first, then whatever the book drains."""
        for note in self._drain():
            self._next += 1
            self._pending[f"{self._next}-0"] = note
        return list(self._pending.items())[:count]

    def ack(self, group: str, *entry_ids: str) -> int:
        """Forget handled entries."""
        return sum(self._pending.pop(entry, None) is not None for entry in entry_ids)


def notification_source(book: AsyncBook) -> NotificationSource:
    """The book itself if it has a consumer group outbox, else a ``DrainSource`` on it.

    Keep the ``DrainSource`` you get: unacknowledged entries live in it.
    """
    return book if isinstance(book, NotificationSource) else DrainSource(book)


class GroupNotificationSource:
    """The group notifications of a ``RedisBook``, read like its outbox."""

    def __init__(self, book: Any) -> None:
        self.book = book

    def consume_notifications(
        self,
        group: str,
        consumer: str,
        count: int = 100,
        block_ms: int | None = None,
        min_idle_ms: int = 60_000,
    ) -> list[tuple[str, AnyNotification]]:
        """Unacknowledged group notifications, as ``consume_notifications`` reads tasks'."""
        entries = self.book.consume_group_notifications(
            group, consumer, count, block_ms, min_idle_ms
        )
        return list(entries)

    def ack(self, group: str, *entry_ids: str) -> int:
        """Acknowledge handled group notifications."""
        return int(self.book.ack_group_notifications(group, *entry_ids))


def group_notification_source(book: AsyncBook) -> NotificationSource:
    """Where the book's group notifications are read: with acknowledgement from a book
    that has consumer groups, else a ``DrainSource`` over ``drain_group_notifications``."""
    if isinstance(book, NotificationSource) and hasattr(book, "consume_group_notifications"):
        return GroupNotificationSource(book)
    return DrainSource(book, book.drain_group_notifications)


def _describe(note: AnyNotification) -> str:
    if isinstance(note, GroupNotification):
        return f"of group {note.group_id}"
    return f"{note.state.value} of task {note.task_id}"


@dataclass(frozen=True)
class DeliveryReport:
    """What one delivery pass did."""

    delivered: int = 0
    """Entries every sink took (acknowledged)."""
    failed: int = 0
    """Entries left for redelivery."""
    dropped: int = 0
    """Entries given up (acknowledged undelivered): a sink never could take them."""


def deliver_notifications(
    source: NotificationSource,
    sinks: Sequence[Callable[[Any], Any]],
    *,
    group: str = "asyncbook",
    consumer: str = "asyncbook",
    count: int = 100,
    min_idle_ms: int = 60_000,
    max_rounds: int = 100,
) -> DeliveryReport:
    """Hand every pending notification to each sink; ack those all sinks took.

    ``sinks`` take what ``source`` holds: task notifications (``Sink``), or a group
    notification source's (``GroupSink``).
    """
    delivered = failed = dropped = 0
    for _ in range(max_rounds):
        entries = source.consume_notifications(group, consumer, count, None, min_idle_ms)
        done: list[str] = []
        given_up: list[str] = []
        for entry_id, note in entries:
            try:
                for sink in sinks:
                    sink(note)
            except PermanentSinkError as error:
                given_up.append(entry_id)
                logger.error(
                    "asyncbook: notification %s given up: it can never be delivered (%s)",
                    _describe(note),
                    error,
                )
            except Exception as error:
                failed += 1
                logger.error(
                    "asyncbook: notification %s not delivered (%s); it will be retried",
                    _describe(note),
                    error,
                )
            else:
                done.append(entry_id)
        if done or given_up:
            source.ack(group, *done, *given_up)
            delivered += len(done)
            dropped += len(given_up)
        if len(done) + len(given_up) < count:
            break
    return DeliveryReport(delivered=delivered, failed=failed, dropped=dropped)
