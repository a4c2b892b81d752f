"""``GET /api/queues``: the broker's queues (ready, per priority, unacked, the oldest
message's age) beside asyncbook's own queue and the sweep's health.

The broker is read off the event loop, one read at a time, and a read is reused for a
second by every request asking the same: however many pages poll, the broker sees at
most one read per second per question. Without a broker the answer still carries the
sweep's health, and says the broker is not configured.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence

import anyio
import anyio.to_thread
from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .._fleet import WORKER_SILENCE_MS, consumers_by_queue, unconsumed_queues
from .._queues import (
    DEFAULT_OWN_QUEUE,
    MAX_NAMED_QUEUES,
    MAX_QUEUES,
    BrokerReader,
    BrokerSnapshot,
    BrokerState,
    checked_queue_name,
    oldest_task_ids,
    queues_report,
    read_broker,
)
from .._stranded import stranded, stranded_query
from ..errors import invalid
from ._health import read_health
from ._reader import Reader
from ._sse import parse_count

__all__ = ["REUSE_SECONDS", "QueuesApi", "queues_params"]

REUSE_SECONDS = 1.0
"""How long one read of the broker answers the same question again."""
_KEPT_READS = 32
_LOOKUPS_AT_ONCE = 8

Read = tuple[BrokerSnapshot | None, BrokerState]


def queues_params(params: QueryParams) -> tuple[list[str], int]:
    """The queues a request names (``queue=``, repeatable) and its ``limit``; a bad value
    is a 400 naming its parameter."""
    given = params.getlist("queue")
    if len(given) > MAX_NAMED_QUEUES:
        raise invalid(f"queue may be given at most {MAX_NAMED_QUEUES} times", field="queue")
    named = [checked_queue_name(value) for value in given]
    text = params.get("limit") or ""
    limit = MAX_QUEUES if text == "" else parse_count(text, "limit")
    if not 1 <= limit <= MAX_QUEUES:
        raise invalid(f"limit must be from 1 to {MAX_QUEUES}", field="limit")
    return list(dict.fromkeys(named)), limit


class QueuesApi:
    """The ``/api/queues`` handler over the book (``reader``) and a broker (or None)."""

    def __init__(
        self,
        reader: Reader,
        broker: BrokerReader | None,
        own_queue: str = DEFAULT_OWN_QUEUE,
        with_info: bool = True,
    ) -> None:
        self.reader = reader
        self.broker = broker
        self.own_queue = checked_queue_name(own_queue, "ownQueue")
        self.with_info = with_info
        """The book keeps task info (so the oldest messages' ages can be told)."""
        self._limiter = anyio.CapacityLimiter(1)
        self._reads: dict[tuple[tuple[str, ...], int], tuple[float, Read]] = {}

    async def queues(self, request: Request) -> Response:
        named, limit = queues_params(request.query_params)
        health = await read_health(self.reader)
        snapshot, state = await self._read(tuple(named), limit)
        created = await self._created(oldest_task_ids(snapshot)) if self.with_info else {}
        consumers = await self.consumers()
        report = queues_report(snapshot, state, health, created, self.own_queue, consumers)
        report = report.model_copy(update={"stranded_tasks": await self.stranded()})
        return JSONResponse(report.to_wire(), headers={"Cache-Control": "no-store"})

    async def consumers(self) -> dict[str, int] | None:
        """Online workers per queue, by their records (None: a book without the
        console keeps none)."""
        if not self.with_info:
            return None
        found = await self.reader.workers(WORKER_SILENCE_MS)
        return consumers_by_queue((w.record, bool(w.online)) for w in found if w.record)

    async def stranded(self) -> dict[str, int] | None:
        """Per queue, the tracked tasks queued over ``STRANDED_AFTER_MS`` in a queue no
        online worker consumes (None: a book without the console)."""
        consumers = await self.consumers()
        if consumers is None:
            return None
        page = await self.reader.search(stranded_query())
        return stranded(page.tasks, consumers, await self.reader.now_ms())

    async def unconsumed(self) -> tuple[dict[str, int], list[str] | None] | None:
        """Online workers per queue, and the queues whose ready messages no online
        worker consumes (None without a broker); None for a book without the console."""
        consumers = await self.consumers()
        if consumers is None or self.broker is None:
            return None if consumers is None else (consumers, None)
        snapshot, _state = await self._read((), MAX_QUEUES)
        ready = {queue.name: queue.ready for queue in snapshot.queues} if snapshot else {}
        return consumers, unconsumed_queues(ready, consumers)

    async def _read(self, named: tuple[str, ...], limit: int) -> Read:
        """A read of the broker: a fresh one, or one made within ``REUSE_SECONDS``."""
        key = (named, limit)
        async with self._limiter:  # one read at a time; a waiter then finds it fresh
            kept = self._reads.get(key)
            if kept is not None and time.monotonic() - kept[0] < REUSE_SECONDS:
                return kept[1]
            answer = await anyio.to_thread.run_sync(
                read_broker, self.broker, list(named), self.own_queue, limit
            )
            if len(self._reads) >= _KEPT_READS:
                self._reads.clear()
            self._reads[key] = (time.monotonic(), answer)
            return answer

    async def _created(self, ids: Sequence[str]) -> Mapping[str, float | None]:
        """When the book created each of these tasks (None: it does not hold it)."""
        gate = asyncio.Semaphore(_LOOKUPS_AT_ONCE)

        async def created(task_id: str) -> float | None:
            async with gate:
                info = await self.reader.info(task_id)
            return None if info is None else info.created_at_ms

        found = await asyncio.gather(*(created(task_id) for task_id in ids))
        return dict(zip(ids, found, strict=True))
