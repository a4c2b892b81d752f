"""The broker side of the console: how many messages wait in each Celery queue, how many
are unacked, how old the oldest one is, and asyncbook's own queue with the sweep's health.

A broker reader (a ``BrokerReader``: ``RedisBroker`` or ``AmqpBroker`` of
``asyncbook.celery``, which knows Celery's layouts) gives a ``BrokerSnapshot``: what the
broker holds, nothing of the book. The web and the CLI are handed a reader; only the
CLI builds one. ``queues_report`` puts it beside the book's side
(the oldest messages' creation times, the sweep's health) as the ``QueuesReport`` that
``GET /api/queues`` and ``asyncbook queues --json`` answer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field

from ._health import SweepHealth
from ._models import WireModel
from .errors import invalid

__all__ = [
    "DEFAULT_OWN_QUEUE",
    "MAX_NAMED_QUEUES",
    "MAX_QUEUES",
    "BrokerReader",
    "BrokerSnapshot",
    "BrokerState",
    "BrokerUnreadableError",
    "OldestMessage",
    "OwnQueue",
    "QueueDepth",
    "QueueSnapshot",
    "QueuesReport",
    "UnackedCount",
    "UnsupportedBroker",
    "broker_kind",
    "checked_queue_name",
    "broker_state",
    "oldest_task_ids",
    "queues_report",
    "read_broker",
    "shown_url",
]

MAX_QUEUES = 200
"""Most queues one answer lists (more are cut, and the answer says so)."""
MAX_NAMED_QUEUES = 50
"""Most queues a request may name (``queue=``, ``--queue``)."""
MAX_AGE_LOOKUPS = 64
"""Most oldest messages' tasks looked up in the book per answer (their creation time)."""
NOT_CONFIGURED = "no broker configured: pass --broker URL or set ASYNCBOOK_BROKER_URL"
MAX_QUEUE_NAME = 200
"""Longest queue name a request may give."""
DEFAULT_OWN_QUEUE = "asyncbook"
"""The queue ``asyncbook.sweep`` and ``asyncbook.deliver`` are routed to by default
(the Celery setting ``asyncbook_queue``)."""

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SCHEMES = {"redis": "redis", "rediss": "redis", "unix": "redis", "amqp": "amqp", "amqps": "amqp"}


def checked_queue_name(name: str, field_name: str = "queue") -> str:
    """``name`` when it may name a queue (1 to 200 characters, no control character);
    else ``invalid`` naming ``field_name``."""
    if not 1 <= len(name) <= MAX_QUEUE_NAME or _CONTROL.search(name):
        raise invalid(
            f"{field_name} must be 1 to {MAX_QUEUE_NAME} characters without control characters",
            field=field_name,
        )
    return name


def broker_kind(url: str) -> str | None:
    """``redis`` or ``amqp`` by the URL's scheme (None: a broker of another kind)."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    return _SCHEMES.get(scheme)


def shown_url(url: str) -> str:
    """The URL with its password hidden (``redis://:***@host:6379/0``)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


@dataclass(frozen=True)
class OldestMessage:
    """The message at a queue's oldest end, as far as it could be read."""

    task_id: str | None = None
    """Its task id (Celery's ``id`` header), when it has one."""
    task_name: str | None = None
    """Its task name (Celery's ``task`` header)."""
    sent_ms: float | None = None
    """When it was sent, from a ``timestamp`` header or property (seconds), if present."""
    note: str | None = None
    """Why it could not be read (not JSON, no headers)."""


@dataclass(frozen=True)
class QueueSnapshot:
    """One queue as the broker holds it."""

    name: str
    ready: int
    """Messages waiting (every priority)."""
    priorities: Mapping[str, int] = field(default_factory=dict)
    """Messages waiting per priority step (Redis: ``0``, ``3``, ``6``, ``9``)."""
    unacked: int | None = None
    """Messages delivered to a worker and not acknowledged yet (None: not known)."""
    consumers: int | None = None
    """Consumers, where the broker says (None on Redis: it does not)."""
    oldest: Sequence[OldestMessage] = ()
    """The oldest message of each non-empty priority sub-queue."""
    oldest_note: str | None = None
    """Why no oldest message was read, when none was although messages wait."""


@dataclass(frozen=True)
class BrokerSnapshot:
    """What one read of the broker found."""

    queues: Sequence[QueueSnapshot]
    truncated: bool = False
    """More queues than the limit: the rest are left out."""
    discovery_complete: bool = True
    """Every binding key was scanned (false: the scan stopped at its cap)."""
    unacked_total: int | None = None
    """Unacked messages of every queue (exact; None where the broker does not say)."""
    unacked_exact: bool = True
    """The per-queue unacked counts cover every unacked message (false: a sample)."""
    unacked_unattributed: int = 0
    """Unacked messages read whose queue could not be told (a topic or fanout route)."""


class BrokerUnreadableError(Exception):
    """The broker could not be read: the message says why (unreachable, not supported)."""


class BrokerReader(Protocol):
    """Reads a broker's queues (``RedisBroker``, ``AmqpBroker`` of ``asyncbook.celery``):
    what the status server reads, handed to it by construction; raises
    ``BrokerUnreadableError`` when it cannot."""

    kind: str
    """``redis`` or ``amqp``."""
    url: str
    """The broker's URL, its password hidden."""

    def snapshot(self, named: Sequence[str], own_queue: str, limit: int) -> BrokerSnapshot:
        """The queues found plus ``named`` and ``own_queue``, ``limit`` at most."""
        ...

    def close(self) -> None:
        """Close its connections."""
        ...


class UnsupportedBroker:
    """A broker of a kind asyncbook does not inspect: every read says so."""

    def __init__(self, url: str) -> None:
        self.url = shown_url(url)
        self.kind = url.split("://", 1)[0].lower() if "://" in url else "unknown"

    def snapshot(self, named: Sequence[str], own_queue: str, limit: int) -> BrokerSnapshot:
        """Refuses: only Redis and AMQP brokers are inspected."""
        raise BrokerUnreadableError(
            f"only Redis (redis://, rediss://, unix://) and AMQP (amqp://) brokers are "
            f"inspected, not {self.kind}://"
        )

    def close(self) -> None:
        """Nothing to close."""


class QueueDepth(WireModel):
    """One queue in ``GET /api/queues``."""

    name: str
    ready: int = Field(description="Messages waiting, every priority included.")
    priorities: dict[str, int] = Field(
        description="Messages waiting per priority step (Redis sub-queues; empty for AMQP)."
    )
    unacked: int | None = Field(
        description="Delivered to a worker, not acknowledged yet (see `unacked.exact`)."
    )
    consumers: int | None = Field(description="Consumers (AMQP); null on Redis.")
    oldest_task_id: str | None = Field(description="The oldest waiting message's task id.")
    oldest_age_ms: int | None = Field(
        description="How long ago the oldest waiting message's task was created."
    )
    oldest_note: str | None = Field(description="Why `oldestAgeMs` is null (if it is).")
    asyncbook: bool = Field(description="Whether this is asyncbook's own queue.")
    online_workers: int | None = Field(
        default=None,
        description="Online workers consuming it, by their records (null: not known).",
    )
    unconsumed: bool = Field(
        default=False, description="Messages are ready and no online worker consumes it."
    )


class BrokerState(WireModel):
    """Which broker was read, and what kept it from being read."""

    configured: bool
    kind: str | None = Field(description="`redis` or `amqp`; null when not configured.")
    url: str | None = Field(description="The broker's URL, its password hidden.")
    problem: str | None = Field(description="Why the queues are not shown, when they are not.")


class UnackedCount(WireModel):
    """The broker's unacked messages."""

    total: int | None = Field(description="Every unacked message (null: not known).")
    exact: bool = Field(description="The per-queue counts cover them all (false: a sample).")
    unattributed: int = Field(description="Unacked messages read whose queue is not known.")


class OwnQueue(WireModel):
    """asyncbook's own queue (``asyncbook_queue``) and the sweep's health."""

    queue: str
    ready: int | None = Field(description="Messages waiting in it (null: broker not read).")
    health: dict[str, Any] = Field(description="As `GET /api/health` answers.")


class QueuesReport(WireModel):
    """``GET /api/queues``: every queue found, and asyncbook's own."""

    now_ms: int
    broker: BrokerState
    queues: list[QueueDepth]
    truncated: bool = Field(description=f"More than `limit` queues (at most {MAX_QUEUES}).")
    discovery_complete: bool = Field(description="Every binding key of the broker was scanned.")
    unacked: UnackedCount
    asyncbook: OwnQueue
    unconsumed: list[str] = Field(
        default=[], description="The queues with ready messages no online worker consumes."
    )
    stranded_tasks: dict[str, int] | None = Field(
        default=None,
        description="Per queue, the tracked tasks queued over 5 minutes that no online "
        "worker consumes (of the 100 oldest queued; null: the book keeps no task info).",
    )

    def to_wire(self) -> dict[str, Any]:
        """The JSON answer: every key present, null where unknown."""
        return self.model_dump(mode="json", by_alias=True)


def _oldest(
    queue: QueueSnapshot, created: Mapping[str, float | None], now_ms: int
) -> tuple[str | None, int | None, str | None]:
    """(task id, age, note) of the queue's oldest message: the oldest of its sub-queues'."""
    if not queue.oldest:
        if queue.ready == 0:
            return None, None, "no message waiting"
        return None, None, queue.oldest_note or "not readable"
    best: tuple[str | None, int | None, str | None] = (None, None, None)
    for message in queue.oldest:
        task_id = message.task_id or ""
        sent = created.get(task_id) if message.sent_ms is None else message.sent_ms
        if sent is not None:
            age = max(0, int(now_ms - sent))
            if best[1] is None or age > best[1]:
                best = (message.task_id, age, None)
        elif best[1] is None:
            if message.note is not None:
                note = message.note
            elif task_id in created:
                note = "an untracked task (not in the book)"
            else:
                note = f"not looked up (the first {MAX_AGE_LOOKUPS} queues' only)"
            best = (message.task_id, None, note)
    return best


def queues_report(
    snapshot: BrokerSnapshot | None,
    broker: BrokerState,
    health: SweepHealth,
    created: Mapping[str, float | None],
    own_queue: str = DEFAULT_OWN_QUEUE,
    consumers: Mapping[str, int] | None = None,
) -> QueuesReport:
    """The report from a broker read (None: not read, ``broker.problem`` says why), the
    book's creation times of the oldest messages' tasks (each id looked up, None when
    the book does not hold it; see ``oldest_task_ids``), and the sweep's health; with
    ``consumers`` (online workers per queue, ``_fleet.consumers_by_queue``) each queue
    says how many consume it, and whether its ready messages wait for nobody."""
    now = health.now_ms
    rows = []
    own_ready: int | None = None
    for queue in snapshot.queues if snapshot is not None else ():
        task_id, age, note = _oldest(queue, created, now)
        if queue.name == own_queue:
            own_ready = queue.ready
        rows.append(
            QueueDepth(
                name=queue.name,
                ready=queue.ready,
                priorities=dict(queue.priorities),
                unacked=queue.unacked,
                consumers=queue.consumers,
                oldest_task_id=task_id,
                oldest_age_ms=age,
                oldest_note=note,
                asyncbook=queue.name == own_queue,
                online_workers=None if consumers is None else consumers.get(queue.name, 0),
                unconsumed=consumers is not None
                and bool(queue.ready)
                and not consumers.get(queue.name),
            )
        )
    unacked = UnackedCount(
        total=snapshot.unacked_total if snapshot else None,
        exact=snapshot.unacked_exact if snapshot else False,
        unattributed=snapshot.unacked_unattributed if snapshot else 0,
    )
    return QueuesReport(
        now_ms=now,
        broker=broker,
        queues=rows,
        truncated=snapshot.truncated if snapshot else False,
        discovery_complete=snapshot.discovery_complete if snapshot else False,
        unacked=unacked,
        asyncbook=OwnQueue(queue=own_queue, ready=own_ready, health=health.to_wire()),
        unconsumed=[row.name for row in rows if row.unconsumed],
    )


def broker_state(broker: BrokerReader | None, problem: str | None = None) -> BrokerState:
    """What the report says of ``broker`` (None: not configured)."""
    if broker is None:
        return BrokerState(configured=False, kind=None, url=None, problem=NOT_CONFIGURED)
    return BrokerState(configured=True, kind=broker.kind, url=broker.url, problem=problem)


def read_broker(
    broker: BrokerReader | None, named: Sequence[str], own_queue: str, limit: int
) -> tuple[BrokerSnapshot | None, BrokerState]:
    """One read of ``broker``, and what the report says of it (the reason when unread)."""
    if broker is None:
        return None, broker_state(None)
    try:
        return broker.snapshot(named, own_queue, limit), broker_state(broker)
    except BrokerUnreadableError as error:
        return None, broker_state(broker, str(error))


def oldest_task_ids(snapshot: BrokerSnapshot | None, most: int = MAX_AGE_LOOKUPS) -> list[str]:
    """The task ids of the oldest messages, to look their creation up in the book."""
    ids = (
        message.task_id
        for queue in (snapshot.queues if snapshot is not None else ())
        for message in queue.oldest
        if message.task_id is not None and message.sent_ms is None
    )
    return list(dict.fromkeys(ids))[:most]
