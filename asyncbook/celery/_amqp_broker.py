"""Reading a Celery broker on AMQP (RabbitMQ) through kombu: a passive ``queue.declare``
per queue answers its ready messages and its consumers.

AMQP lists no queues to a client (that takes RabbitMQ's management API), so the queues
read are Celery's default (``celery``), asyncbook's own and those named. A queue that
does not exist is left out (asyncbook's own is shown empty). AMQP does not say how many
messages a queue has handed out unacknowledged, nor lets a message be looked at without
taking it: ``unacked`` and the oldest message's age are null.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kombu import Connection
from kombu.exceptions import OperationalError

from .._queues import (
    DEFAULT_OWN_QUEUE,
    MAX_QUEUES,
    BrokerSnapshot,
    BrokerUnreadableError,
    QueueSnapshot,
    shown_url,
)

__all__ = ["CELERY_DEFAULT_QUEUE", "AmqpBroker"]

CELERY_DEFAULT_QUEUE = "celery"
TIMEOUT_S = 2.0
_UNREADABLE = "AMQP lets no message be looked at without taking it"


class AmqpBroker:
    """Reads queues of a Celery broker on AMQP (``amqp://``, ``amqps://``); a URL that
    cannot be read is a ``ValueError`` at once."""

    kind = "amqp"

    def __init__(self, url: str, *, timeout: float = TIMEOUT_S) -> None:
        self.url = shown_url(url)
        self._url = url
        self.timeout = timeout
        Connection(url).release()  # a URL kombu cannot read is a ValueError here, not later

    def close(self) -> None:
        """Nothing kept open: each read connects and closes."""

    def snapshot(
        self,
        named: Sequence[str] = (),
        own_queue: str = DEFAULT_OWN_QUEUE,
        limit: int = MAX_QUEUES,
    ) -> BrokerSnapshot:
        """Ready messages and consumers of ``celery``, ``own_queue`` and ``named`` (one
        passive declare each); ``BrokerUnreadableError`` when the broker does not answer."""
        asked = list(dict.fromkeys([own_queue, CELERY_DEFAULT_QUEUE, *named]))
        chosen = asked[:limit]
        connection = Connection(self._url, connect_timeout=self.timeout)
        unreachable: tuple[type[BaseException], ...] = (
            OperationalError,
            *connection.connection_errors,
        )
        try:
            connection.ensure_connection(max_retries=1, interval_start=0, interval_step=0)
            rows = [row for name in chosen if (row := self._queue(connection, name, own_queue))]
        except unreachable as error:
            raise BrokerUnreadableError(f"cannot read the broker: {error}") from None
        finally:
            connection.release()
        return BrokerSnapshot(
            queues=sorted(rows, key=lambda row: row.name),
            truncated=len(asked) > limit,
            discovery_complete=False,
            unacked_total=None,
            unacked_exact=False,
        )

    def _queue(self, connection: Connection, name: str, own_queue: str) -> QueueSnapshot | None:
        channel: Any = connection.channel()  # kombu's stubs type the AMQP channel loosely
        try:
            _, ready, consumers = channel.queue_declare(queue=name, passive=True)
        except connection.channel_errors:
            # No such queue (the broker closed the channel).
            return QueueSnapshot(name=name, ready=0) if name == own_queue else None
        finally:
            channel.close()
        return QueueSnapshot(
            name=name, ready=int(ready), consumers=int(consumers), oldest_note=_UNREADABLE
        )
