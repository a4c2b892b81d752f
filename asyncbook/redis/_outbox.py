"""``Outbox``: ``RedisBook``'s notification streams, drained or consumed at least once.

The scripts append a task's notification to the outbox stream and a group's to the
group outbox stream; a reader drains a stream, or reads it through a consumer group and
acknowledges each entry it handled.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from redis.exceptions import ResponseError

from .._book import sort_notifications
from .._checks import require_integer, require_limit, require_text
from .._models import GROUP_END_STATES, AsyncState, GroupNotification, Notification
from ._connection import reports_outages
from ._keys import KeySchema
from ._replies import text_of
from ._scripts import BookScripts

__all__ = ["Outbox"]

log = logging.getLogger(__name__)


class Outbox:
    """The notification methods of ``RedisBook`` (a mixin: the book provides the state)."""

    client: Any
    keys: KeySchema
    _scripts: BookScripts
    _groups: set[tuple[str, str]]
    """(stream, consumer group) pairs known to exist."""
    _slot_client: Callable[[], Any]

    @reports_outages
    def drain_notifications(self) -> list[Notification]:
        """Every pending notification, sorted by task id then time; empties the outbox."""
        flat = [text_of(item) for item in self._scripts.drain(keys=[self.keys.outbox])]
        notes = [
            Notification(
                task_id=flat[i], state=AsyncState(flat[i + 1]), at_ms=json.loads(flat[i + 2])
            )
            for i in range(0, len(flat), 3)
        ]
        return sort_notifications(notes)

    @reports_outages
    def consume_notifications(
        self,
        group: str,
        consumer: str,
        count: int = 100,
        block_ms: int | None = None,
        min_idle_ms: int = 60_000,
    ) -> list[tuple[str, Notification]]:
        """Read notifications at least once: acknowledge each with ``ack`` when handled.

        Entries another consumer read but never acknowledged for ``min_idle_ms`` are
        claimed first; then new entries. The group is created on first use.
        """
        entries = self._consume(self.keys.outbox, group, consumer, count, block_ms, min_idle_ms)
        return [(entry_id, _entry_notification(fields)) for entry_id, fields in entries]

    @reports_outages
    def ack(self, group: str, *entry_ids: str) -> int:
        """Acknowledge handled notifications; returns how many were pending."""
        if not entry_ids:
            return 0
        return int(self.client.xack(self.keys.outbox, require_text(group, "group"), *entry_ids))

    @reports_outages
    def drain_group_notifications(self) -> list[GroupNotification]:
        """Every pending group notification, in order; empties their stream."""
        stream = self.keys.group_outbox
        pipe = self._slot_client().pipeline(transaction=True)
        pipe.xrange(stream)
        pipe.delete(stream)
        entries, _ = pipe.execute()
        return [_group_notification(fields) for _entry_id, fields in entries]

    @reports_outages
    def consume_group_notifications(
        self,
        group: str,
        consumer: str,
        count: int = 100,
        block_ms: int | None = None,
        min_idle_ms: int = 60_000,
    ) -> list[tuple[str, GroupNotification]]:
        """Group notifications, at least once: acknowledge with ``ack_group_notifications``."""
        entries = self._consume(
            self.keys.group_outbox, group, consumer, count, block_ms, min_idle_ms
        )
        return [(entry_id, _group_notification(fields)) for entry_id, fields in entries]

    @reports_outages
    def ack_group_notifications(self, group: str, *entry_ids: str) -> int:
        """Acknowledge handled group notifications; returns how many were pending."""
        if not entry_ids:
            return 0
        return int(
            self.client.xack(self.keys.group_outbox, require_text(group, "group"), *entry_ids)
        )

    def _consume(
        self,
        stream: str,
        group: Any,
        consumer: Any,
        count: Any,
        block_ms: Any,
        min_idle_ms: Any,
    ) -> list[tuple[str, dict[Any, Any]]]:
        """Entries of ``stream`` for ``consumer`` of ``group``: those another consumer left
        unacknowledged for ``min_idle_ms`` first, then new ones. The group is created on
        first use, and again if the stream (with its groups) went away."""
        group = require_text(group, "group")
        consumer = require_text(consumer, "consumer")
        limit = require_limit(count, "count")
        idle = require_integer(min_idle_ms, "min_idle_ms")
        block = None if block_ms is None else require_integer(block_ms, "block_ms")
        self._ensure_group(stream, group)
        try:
            claimed = self.client.xautoclaim(stream, group, consumer, idle, "0-0", count=limit)
        except ResponseError as error:
            if "NOGROUP" not in str(error):
                raise
            # The stream went away (deleted, evicted, a flushed Redis): so did the group.
            log.warning("asyncbook: consumer group %r was gone; created again", group)
            self._groups.discard((stream, group))
            self._ensure_group(stream, group)
            claimed = self.client.xautoclaim(stream, group, consumer, idle, "0-0", count=limit)
        entries = list(claimed[1])
        if len(entries) < limit:
            fresh = self.client.xreadgroup(
                group,
                consumer,
                {stream: ">"},
                count=limit - len(entries),
                block=None if entries else block,
            )
            for _stream, items in fresh or []:
                entries.extend(items)
        return [(text_of(entry_id), fields) for entry_id, fields in entries if fields]

    def _ensure_group(self, stream: str, group: str) -> None:
        if (stream, group) in self._groups:
            return
        try:
            self.client.xgroup_create(stream, group, id="0", mkstream=True)
        except ResponseError as error:
            if "BUSYGROUP" not in str(error):
                raise
        self._groups.add((stream, group))


def _entry_notification(fields: dict[bytes | str, bytes | str]) -> Notification:
    values = {text_of(key): text_of(value) for key, value in fields.items()}
    return Notification(
        task_id=values["taskId"],
        state=AsyncState(values["state"]),
        at_ms=json.loads(values["atMs"]),
    )


def _group_notification(fields: dict[Any, Any]) -> GroupNotification:
    values = {text_of(key): text_of(value) for key, value in fields.items()}
    return GroupNotification(
        group_id=json.loads(values["groupId"]),
        at_ms=json.loads(values["atMs"]),
        total=int(values["total"]),
        counts={state: int(values.get(state, "0")) for state in GROUP_END_STATES},
    )
