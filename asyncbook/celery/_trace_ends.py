"""Ends no worker sees, in the task's trace (``asyncbook_tracing``, docs/tracing.md).

A queued task expired by the sweep at its deadline, an attempt failed as stalled, a
cancel through the book, the console or the CLI: each end writes one notification to
the book's outbox. With tracing on, each delivery pass also reads the outbox through a
consumer group of its own (``<asyncbook_consumer_group>.traces``: the sinks' delivery is
not held up, nor sent again, by it), reads the stored trace context of the batch's
expired, cancelled and failed tasks in one round trip, and records each such end (a
failure only when its error starts ``stalled``: a worker's own failure is on its
attempt's span already) as a short ``end <task>`` span in the trace the publish started.

The outbox is read at least once: an entry read again (the process stopped between the
span and its acknowledgement) records its end again, rarely, as a second span.
"""

from __future__ import annotations

from typing import Any

from .._book import AsyncBook
from .._models import AsyncState, Notification
from .._trace_store import TraceStore
from ._settings import Settings
from ._state import Lazy
from ._tracing import Tracing

__all__ = ["GROUP_SUFFIX", "TraceEnds"]

GROUP_SUFFIX = ".traces"
"""The trace ends' consumer group: the sinks' group's name and this."""
_COUNT = 100
_MAX_ROUNDS = 100
_UNSEEN = (AsyncState.EXPIRED, AsyncState.CANCELLED, AsyncState.FAILED)
STALLED = "stalled"
"""How the error of an attempt the sweep failed as stalled starts (``stall_event``)."""


class TraceEnds:
    """Records the ends of the book's notifications in their tasks' traces."""

    def __init__(self, settings: Lazy[Settings], book: Lazy[AsyncBook], tracing: Tracing) -> None:
        self.settings = settings
        self.book = book
        self.tracing = tracing

    def record(self, consumer: str) -> int:
        """One pass over the outbox: the ends recorded (0, reading nothing, when tracing
        is off or the book keeps no trace contexts)."""
        settings = self.settings.get()
        book = self.book.get()
        if not settings.tracing or not isinstance(book, TraceStore):
            return 0
        group = settings.consumer_group + GROUP_SUFFIX
        recorded = 0
        for _ in range(_MAX_ROUNDS):
            entries = book.consume_notifications(
                group, consumer, _COUNT, None, settings.redelivery_idle_ms
            )
            recorded += self._ends(book, [note for _entry, note in entries])
            if entries:
                book.ack(group, *(entry for entry, _note in entries))
            if len(entries) < _COUNT:
                break
        return recorded

    def _ends(self, book: TraceStore, notes: list[Any]) -> int:
        ends = [n for n in notes if isinstance(n, Notification) and n.state in _UNSEEN]
        if not ends:
            return 0
        stored = book.stored_traces([note.task_id for note in ends])
        recorded = 0
        for note in ends:
            found = stored.get(note.task_id)
            if found is None:
                continue
            error = found.error or ""
            if note.state is AsyncState.FAILED and not error.startswith(STALLED):
                continue  # a worker's failure: on its attempt's span
            self.tracing.stored_end(
                found.name or "task",
                note.task_id,
                found.trace,
                note.state.value,
                note.at_ms,
                error if note.state is AsyncState.FAILED else None,
            )
            recorded += 1
        return recorded
