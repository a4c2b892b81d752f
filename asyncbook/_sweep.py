"""The expiry sweep: every live task whose deadline has passed is expired, in batches;
then every running task whose heartbeat stopped is failed as "stalled".

Every worker of an installed app runs it every second in its main process (one per
namespace at a time), and beat as ``asyncbook.sweep``. Expiring is idempotent (a second
expire is ``duplicate-expire`` and notifies nothing), so two sweeps at once, or two
beats by mistake, never notify twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

from ._book import AsyncBook
from ._models import AsyncTransition
from .errors import AsyncBookError

__all__ = [
    "CountedExpiries",
    "DueTasks",
    "Expiry",
    "OverlappedExpiries",
    "Prunable",
    "Sharded",
    "SweepLease",
    "SweepReport",
    "sweep",
]

_T = TypeVar("_T")


@runtime_checkable
class Prunable(Protocol):
    """A book that drops ended tasks past retention from its indexes (``RedisBook``)."""

    def prune(self, limit: int = 1000) -> int:
        """Drop up to ``limit`` ended tasks past retention; returns how many."""
        ...


@runtime_checkable
class SweepLease(Protocol):
    """A book shared by many processes that lets one of them sweep at a time (``RedisBook``)."""

    def claim_sweep(self, owner: str, lease_ms: int) -> bool:
        """Take (or, held by ``owner``, renew) the sweep lease for ``lease_ms``; True if
        ``owner`` holds it now."""
        ...


class DueTasks(Protocol):
    """Tasks due at a time, and their expiry: a book, or one shard of it."""

    def overdue(self, now_ms: int | float, limit: int = 1000) -> list[str]:
        """Ids of live tasks due at ``now_ms``, earliest first."""
        ...

    def expire_many(
        self, task_ids: Iterable[str], *, full_task: bool = True
    ) -> Sequence[AsyncTransition | AsyncBookError]:
        """Expire these tasks at their deadlines."""
        ...


class Expiry(Protocol):
    """What the sweep reads of one expiry."""

    @property
    def changed(self) -> bool:
        """True if it expired the task (False: it had ended already)."""
        ...


@runtime_checkable
class CountedExpiries(Protocol):
    """Due tasks whose expiries can answer only what the sweep reads (``RedisBook``'s
    shards): no task built for each."""

    def expire_counted(self, task_ids: list[str]) -> Sequence[Expiry | AsyncBookError]:
        """``expire_many``'s expiries (the same writes and answers), each answered as
        whether it changed the task, or its error."""
        ...


@runtime_checkable
class OverlappedExpiries(Protocol):
    """Due tasks expired with the next call sent before the last one's answer is read
    (``RedisBook``'s shards on a plain client): Redis runs one batch while the client
    reads the last."""

    def expire_overlapped(
        self,
        now_ms: int | float,
        batch: int,
        max_batches: int,
        tally: Callable[[int, Sequence[Expiry | AsyncBookError]], bool],
    ) -> bool:
        """Expire what is due, ``batch`` per call, at most ``max_batches`` calls; each
        batch's size and results go to ``tally``, which says whether to send more.
        False if it could not (then or from some batch on): the rest goes batch by batch."""
        ...


@runtime_checkable
class Sharded(Protocol):
    """A book whose shards each keep their own deadlines (``RedisBook``): the sweep
    expires each shard's due tasks on its own, the shards at once, instead of merging
    every shard's overdue list for each batch."""

    def each_shard(self, call: Callable[[Any], _T]) -> list[_T]:
        """``call`` on each shard's ``DueTasks``; the answers in shard order."""
        ...


@dataclass(frozen=True)
class SweepReport:
    """What one sweep did."""

    expired: int = 0
    """Tasks this sweep expired (a task another sweep expired first is not counted)."""
    batches: int = 0
    """Calls of ``expire_many`` (a batch each; on a plain client, sent before the last is read)."""
    errors: int = 0
    """Tasks the book refused to expire."""
    pruned: int = 0
    """Ended tasks dropped from the indexes."""
    stalled: int = 0
    """Running tasks whose heartbeat stopped, failed with "stalled" (extension)."""


def sweep(
    book: AsyncBook,
    now_ms: int | float | None = None,
    *,
    batch: int = 1000,
    max_batches: int = 1000,
) -> SweepReport:
    """Expire every task due at ``now_ms``, ``batch`` per round trip (on a sharded book,
    each shard on its own, at most ``max_batches`` each), then prune once; the book
    records that a sweep ran (``last_sweep_ms``).

    ``now_ms`` defaults to the book's own clock (for ``RedisBook``, the Redis server's),
    so a host whose clock runs fast never expires a task early.
    """
    if now_ms is None:
        now_ms = book.now_ms()
    due_at = now_ms

    def expire_due(part: DueTasks) -> tuple[int, int, int]:
        return _expire_due(part, due_at, batch, max_batches)

    parts = book.each_shard(expire_due) if isinstance(book, Sharded) else [expire_due(book)]
    expired = sum(part[0] for part in parts)
    batches = sum(part[1] for part in parts)
    errors = sum(part[2] for part in parts)
    stalled = 0
    for result in book.end_stalled(now_ms, limit=batch):
        if isinstance(result, AsyncBookError):
            errors += 1
        elif result.changed:
            stalled += 1
    pruned = book.prune() if isinstance(book, Prunable) else 0
    book.record_sweep(now_ms)
    return SweepReport(
        expired=expired, batches=batches, errors=errors, pruned=pruned, stalled=stalled
    )


class _Tally:
    """The counts of one shard's expiries, batch by batch, and whether to go on."""

    def __init__(self, batch: int) -> None:
        self.batch = batch
        self.expired = self.batches = self.errors = 0
        self.going = True

    def __call__(self, due: int, results: Sequence[Expiry | AsyncBookError]) -> bool:
        """Count one batch of ``due`` tasks; False once no more is to be sent."""
        self.batches += 1
        changed = 0
        for result in results:
            if isinstance(result, AsyncBookError):
                self.errors += 1
            elif result.changed:
                changed += 1
        self.expired += changed
        # Nothing changed: another sweep got there first, or the book keeps refusing.
        if due < self.batch or changed == 0:
            self.going = False
        return self.going


def _expire_due(
    book: DueTasks, now_ms: int | float, batch: int, max_batches: int
) -> tuple[int, int, int]:
    """Expire what is due in ``book``, ``batch`` per call: (expired, calls, errors)."""
    tally = _Tally(batch)
    if isinstance(book, OverlappedExpiries) and book.expire_overlapped(
        now_ms, batch, max_batches, tally
    ):
        return tally.expired, tally.batches, tally.errors
    while tally.going and tally.batches < max_batches:
        due = book.overdue(now_ms, limit=batch)
        if not due:
            break
        # The sweep reads only whether each expiry changed anything: no histories.
        results: Sequence[Expiry | AsyncBookError]
        if isinstance(book, CountedExpiries):
            results = book.expire_counted(due)
        else:
            results = book.expire_many(due, full_task=False)
        tally(len(due), results)
    return tally.expired, tally.batches, tally.errors
