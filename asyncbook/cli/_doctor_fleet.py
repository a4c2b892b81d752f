"""The doctor's fleet checks: which workers are online by their records
(``asyncbook._fleet``), and every queue whose ready messages no online worker consumes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .._fleet import WORKER_SILENCE_MS, consumers_by_queue, unconsumed_queues
from .._queues import DEFAULT_OWN_QUEUE, MAX_QUEUES, read_broker
from .._stranded import stranded, stranded_query
from ._doctor import Check
from ._queues import broker_for

__all__ = ["fleet_checks"]


def fleet_checks(book: Any, broker_url: str | None, own_queue: str | None) -> Iterator[Check]:
    """The workers online (their records renewed within the silence), then each queue of
    the broker with ready messages that none of them consumes (a problem: its tasks wait
    for nobody)."""
    try:
        records, _now = book.worker_records()
    except Exception as error:  # the book's Redis: the server check names it
        yield Check("fleet", "problem", f"cannot read the workers' records: {error!r}")
        return
    online = sorted(record.name for record, live in records if live)
    silence = f"{WORKER_SILENCE_MS // 1000} s"
    if online:
        yield Check("fleet", "ok", f"{len(online)} worker(s) online: {', '.join(online)}")
    else:
        detail = f"no worker renewed its record within {silence} ({len(records)} offline kept)"
        yield Check("fleet", "warning", detail, "start one: celery -A <your app> worker")
    yield _stranded_check(book, consumers_by_queue(records))
    broker = broker_for(broker_url)
    try:
        snapshot, state = read_broker(broker, [], own_queue or DEFAULT_OWN_QUEUE, MAX_QUEUES)
    finally:
        if broker is not None:
            broker.close()
    if snapshot is None:
        yield Check("consumed", "skipped", f"the broker's queues not read: {state.problem}")
        return
    ready = {queue.name: queue.ready for queue in snapshot.queues}
    waiting = unconsumed_queues(ready, consumers_by_queue(records))
    for name in waiting:
        yield Check(
            "consumed",
            "problem",
            f"queue {name!r}: {ready[name]} message(s) ready and no online worker consumes it",
            f"start a worker that does: celery -A <your app> worker -Q {name}",
        )
    if not waiting:
        yield Check("consumed", "ok", "every queue with ready messages has an online consumer")


def _stranded_check(book: Any, consumers: dict[str, int]) -> Check:
    """The tracked tasks queued over 5 minutes in a queue no online worker consumes."""
    page = book.search(stranded_query())
    found = stranded(page.tasks, consumers, book.now_ms())
    if not found:
        return Check(
            "stranded", "ok", "no tracked task waits over 5 min for a queue nobody consumes"
        )
    waiting = ", ".join(f"{count} in {queue!r}" for queue, count in found.items())
    fix = "start a worker for each: celery -A <your app> worker -Q " + ",".join(found)
    return Check(
        "stranded", "problem", f"tracked tasks queued over 5 min for nobody: {waiting}", fix
    )
