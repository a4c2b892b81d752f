"""Reading a Celery broker on Redis the way kombu's Redis transport lays it out.

kombu keeps, in the broker's db:

- ``_kombu.binding.<exchange>``: a set per exchange, each member
  ``<routing key>\\x06\\x16<pattern>\\x06\\x16<queue>`` (the queues are found here);
- each queue as a list (``LPUSH`` in, ``RPOP`` out: the oldest message is at index -1),
  and one more list per priority step past 0, ``<queue>\\x06\\x16<step>`` (steps 0, 3, 6,
  9 by default; a worker empties step 0 first);
- ``unacked``: a hash, delivery tag -> ``[message, exchange, routing key]``, of the
  messages handed to a worker and not acknowledged yet (``unacked_index`` orders them by
  time for the visibility timeout).

A read is bounded: the binding keys are found with ``SCAN`` (never ``KEYS``) for at most
``MAX_SCANS`` calls, at most ``MAX_QUEUES`` queues are listed, and at most
``UNACKED_SAMPLE`` unacked messages are read to tell their queues apart (their total is
``HLEN``'s, exact). The queues' lengths, oldest messages and the unacked hash are then
read in one pipeline: one round trip, however many queues.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from .._queues import (
    DEFAULT_OWN_QUEUE,
    MAX_QUEUES,
    BrokerSnapshot,
    BrokerUnreadableError,
    OldestMessage,
    QueueSnapshot,
    shown_url,
)

__all__ = [
    "BINDING_PREFIX",
    "PRIORITY_STEPS",
    "SEP",
    "UNACKED_KEY",
    "RedisBroker",
    "sub_queue",
]

SEP = "\x06\x16"
"""kombu's separator in binding members and priority sub-queue names."""
PRIORITY_STEPS = (0, 3, 6, 9)
"""kombu's default ``priority_steps``."""
BINDING_PREFIX = "_kombu.binding."
UNACKED_KEY = "unacked"
PLUMBING_EXCHANGES = frozenset({"celery.pidbox", "reply.celery.pidbox", "celeryev"})
"""Celery's remote-control and event exchanges: their queues are not task queues."""
SCAN_COUNT = 1000
MAX_SCANS = 20
"""At most this many SCAN calls (about 20,000 keys looked at) to find the binding keys."""
MAX_EXCHANGES = 200
BINDINGS_READ = 1000
"""Members read of each binding set (one SSCAN)."""
UNACKED_SAMPLE = 1000
"""Unacked messages read (one HSCAN) to count them per queue."""
TIMEOUT_S = 2.0
"""Connect and read timeout of the broker's client (a read never hangs a request)."""


def sub_queue(queue: str, step: int) -> str:
    """The list holding ``queue``'s messages of priority ``step`` (step 0: the queue)."""
    return queue if step == 0 else f"{queue}{SEP}{step}"


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _oldest_message(raw: bytes) -> OldestMessage:
    """What a queued kombu message says of itself (Celery's protocol 2 headers)."""
    try:
        message = json.loads(raw)
    except ValueError:
        return OldestMessage(note="not a kombu message (not JSON)")
    headers = message.get("headers") if isinstance(message, dict) else None
    if not isinstance(headers, dict):
        return OldestMessage(note="a message without headers")
    properties = message.get("properties")
    stamp = headers.get("timestamp")
    if stamp is None and isinstance(properties, dict):
        stamp = properties.get("timestamp")
    task_id, name = headers.get("id"), headers.get("task")
    return OldestMessage(
        task_id=task_id if isinstance(task_id, str) else None,
        task_name=name if isinstance(name, str) else None,
        sent_ms=float(stamp) * 1000 if isinstance(stamp, int | float) else None,
        note=None if isinstance(task_id, str) else "a message without a task id",
    )


Routes = dict[str, dict[str, set[str]]]
"""exchange -> routing key -> the queues bound with it."""


class RedisBroker:
    """Reads the queues of a Celery broker on Redis (``redis://``, ``rediss://``,
    ``unix://``), each read bounded (see the module's docstring)."""

    kind = "redis"

    def __init__(self, url: str, *, timeout: float = TIMEOUT_S) -> None:
        self.url = shown_url(url)
        # No retry: a broker that does not answer is said at once, not after backoffs.
        self.client: redis.Redis = redis.Redis.from_url(
            url,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),
        )

    def close(self) -> None:
        """Close the broker's connections."""
        self.client.close()

    def _routes(self) -> tuple[Routes, bool]:
        """The binding sets' routes, and whether the scan for them was complete."""
        keys: set[bytes | str] = set()
        cursor, scans, complete = 0, 0, False
        while scans < MAX_SCANS:
            cursor, found = self.client.scan(cursor, match=f"{BINDING_PREFIX}*", count=SCAN_COUNT)
            keys.update(found)
            scans += 1
            if cursor == 0:
                complete = True
                break
        chosen = sorted(keys)[:MAX_EXCHANGES]
        pipe = self.client.pipeline(transaction=False)
        for key in chosen:
            pipe.sscan(key, 0, count=BINDINGS_READ)
        routes: Routes = {}
        for key, reply in zip(chosen, pipe.execute(raise_on_error=False), strict=True):
            if isinstance(reply, Exception):
                continue
            exchange = _text(key)[len(BINDING_PREFIX) :]
            for member in reply[1]:
                parts = _text(member).split(SEP, 2)
                if len(parts) != 3 or not parts[2]:
                    continue
                routing_key, _, queue = parts
                routes.setdefault(exchange, {}).setdefault(routing_key, set()).add(queue)
        return routes, complete and len(keys) <= MAX_EXCHANGES

    def snapshot(
        self,
        named: Sequence[str] = (),
        own_queue: str = DEFAULT_OWN_QUEUE,
        limit: int = MAX_QUEUES,
    ) -> BrokerSnapshot:
        """Every queue bound on the broker (Celery's own plumbing left out) plus ``named``
        and ``own_queue``, at most ``limit`` of them: their lengths per priority, oldest
        messages and unacked counts. ``BrokerUnreadableError`` when the broker does not answer."""
        try:
            return self._snapshot(named, own_queue, limit)
        except (redis.RedisError, OSError) as error:
            raise BrokerUnreadableError(f"cannot read the broker: {error}") from None

    def _snapshot(self, named: Sequence[str], own_queue: str, limit: int) -> BrokerSnapshot:
        routes, complete = self._routes()
        found = {
            queue
            for exchange, keys in routes.items()
            if exchange not in PLUMBING_EXCHANGES
            for queues in keys.values()
            for queue in queues
        }
        asked = list(dict.fromkeys([own_queue, *named]))
        rest = sorted(found.difference(asked))
        room = max(0, limit - len(asked))
        queues = sorted(asked[:limit] + rest[:room])
        replies = self._read(queues)
        unacked_total, sample, exact = replies[-3], replies[-2], replies[-1]
        counts, unattributed = _unacked_by_queue(sample, routes)
        rows = [
            _queue(name, replies[index * 2 * len(PRIORITY_STEPS) :], counts.get(name, 0))
            for index, name in enumerate(queues)
        ]
        return BrokerSnapshot(
            queues=rows,
            truncated=len(asked) + len(rest) > limit,
            discovery_complete=complete,
            unacked_total=unacked_total if isinstance(unacked_total, int) else None,
            unacked_exact=bool(exact),
            unacked_unattributed=unattributed,
        )

    def _read(self, queues: Sequence[str]) -> list[Any]:
        """One pipeline: per queue and step LLEN and LINDEX -1, then HLEN and one HSCAN of
        the unacked hash (its values, and whether they were all read)."""
        pipe = self.client.pipeline(transaction=False)
        for name in queues:
            for step in PRIORITY_STEPS:
                pipe.llen(sub_queue(name, step))
                pipe.lindex(sub_queue(name, step), -1)
        pipe.hlen(UNACKED_KEY)
        pipe.hscan(UNACKED_KEY, 0, count=UNACKED_SAMPLE)
        replies = pipe.execute(raise_on_error=False)
        scanned = replies.pop()
        if isinstance(scanned, Exception):
            return [*replies, [], False]
        cursor, entries = scanned
        return [*replies, list(entries.values()), cursor == 0]


def _queue(name: str, replies: Sequence[Any], unacked: int) -> QueueSnapshot:
    priorities: dict[str, int] = {}
    oldest = []
    for position, step in enumerate(PRIORITY_STEPS):
        length, last = replies[2 * position], replies[2 * position + 1]
        priorities[str(step)] = length if isinstance(length, int) else 0
        if isinstance(last, bytes):
            oldest.append(_oldest_message(last))
    return QueueSnapshot(
        name=name,
        ready=sum(priorities.values()),
        priorities=priorities,
        unacked=unacked,
        oldest=tuple(oldest),
    )


def _unacked_by_queue(
    entries: Iterable[bytes], routes: Mapping[str, Mapping[str, set[str]]]
) -> tuple[Counter[str], int]:
    """Unacked messages per queue (by their exchange and routing key, as kombu restores
    them), and how many could not be told."""
    counts: Counter[str] = Counter()
    unattributed = 0
    for raw in entries:
        try:
            _, exchange, routing_key = json.loads(raw)
        except (ValueError, TypeError):
            exchange = routing_key = None
        if not isinstance(exchange, str) or not isinstance(routing_key, str):
            queues: set[str] = set()  # not kombu's [message, exchange, routing key]
        elif not exchange:
            queues = {routing_key}
        else:
            queues = set(routes.get(exchange, {}).get(routing_key, set()))
        if not queues:
            unattributed += 1
        counts.update(queues)
    return counts, unattributed
