"""A book's notification streams (the outbox of task notifications, the group outbox of
group ones), drained or consumed at least once, as plans (either engine runs them)."""

from __future__ import annotations

import json
import logging
from typing import Any, NamedTuple

from redis.exceptions import ResponseError

from .._checks import require_integer, require_limit, require_text
from .._models import GROUP_END_STATES, AsyncState, GroupNotification, Notification
from ._plan import Pipeline, Plan, ScriptCall, command
from ._replies import text_of
from ._shard import Shard

__all__ = ["Reading", "ack", "consume", "drain"]

log = logging.getLogger(__name__)


def drain(shard: Shard, groups: bool) -> Plan[list[Any]]:
    """Every pending notification (``groups``: group notifications), emptying their
    stream: task notifications as drain.lua answers them, group ones in order."""
    if groups:
        stream = shard.keys.group_outbox
        entries, _ = yield Pipeline(
            [command("xrange", stream), command("delete", stream)], transaction=True
        )
        return [_group_notification(fields) for _entry_id, fields in entries]
    flat = [text_of(item) for item in (yield ScriptCall("drain", [shard.keys.outbox]))]
    return [_notification(*flat[i : i + 4]) for i in range(0, len(flat), 4)]


def ack(shard: Shard, groups: bool, group: str, entry_ids: tuple[str, ...]) -> Plan[int]:
    """Acknowledge handled entries of the outbox (``groups``: the group outbox); returns
    how many were pending."""
    if not entry_ids:
        return 0
    stream = shard.keys.group_outbox if groups else shard.keys.outbox
    return int((yield command("xack", stream, require_text(group, "group"), *entry_ids)))


class Reading(NamedTuple):
    """How a consumer reads a stream: up to ``count`` entries, waiting ``block_ms`` for
    new ones (None: not at all), claiming those left idle ``min_idle_ms``."""

    count: Any
    block_ms: Any
    min_idle_ms: Any


def consume(
    shard: Shard, groups: bool, group: Any, consumer: Any, reading: Reading
) -> Plan[list[tuple[str, Any]]]:
    """``consume_notifications`` on one shard (``groups``: the group notifications'); the
    group is also created again if the stream (with its groups) went away."""
    stream = shard.keys.group_outbox if groups else shard.keys.outbox
    parse = _group_notification if groups else _entry_notification
    group = require_text(group, "group")
    consumer = require_text(consumer, "consumer")
    limit = require_limit(reading.count, "count")
    idle = require_integer(reading.min_idle_ms, "min_idle_ms")
    block = None if reading.block_ms is None else require_integer(reading.block_ms, "block_ms")
    claim = command("xautoclaim", stream, group, consumer, idle, "0-0", count=limit)
    yield from _ensure_group(shard, stream, group)
    try:
        claimed = yield claim
    except ResponseError as error:
        if "NOGROUP" not in str(error):
            raise
        # The stream went away (deleted, evicted, a flushed Redis): so did the group.
        log.warning("asyncbook: consumer group %r was gone; created again", group)
        shard.stream_groups.discard((stream, group))
        yield from _ensure_group(shard, stream, group)
        claimed = yield claim
    entries = list(claimed[1])
    if len(entries) < limit:
        fresh = yield command(
            "xreadgroup",
            group,
            consumer,
            {stream: ">"},
            count=limit - len(entries),
            block=None if entries else block,
        )
        for _stream, items in fresh or []:
            entries.extend(items)
    return [(text_of(entry_id), parse(fields)) for entry_id, fields in entries if fields]


def _ensure_group(shard: Shard, stream: str, group: str) -> Plan[None]:
    if (stream, group) in shard.stream_groups:
        return
    try:
        yield command("xgroup_create", stream, group, id="0", mkstream=True)
    except ResponseError as error:
        if "BUSYGROUP" not in str(error):
            raise
    shard.stream_groups.add((stream, group))


def _entry_notification(fields: dict[bytes | str, bytes | str]) -> Notification:
    values = {text_of(key): text_of(value) for key, value in fields.items()}
    return _notification(
        values["taskId"], values["state"], values["atMs"], values.get("version", "")
    )


def _notification(task_id: str, state: str, at_ms: str, version: str) -> Notification:
    """A notification from an outbox entry's fields (version '': an older entry's)."""
    return Notification(
        task_id=task_id,
        state=AsyncState(state),
        at_ms=json.loads(at_ms),
        version=int(version) if version else None,
    )


def _group_notification(fields: dict[Any, Any]) -> GroupNotification:
    values = {text_of(key): text_of(value) for key, value in fields.items()}
    return GroupNotification(
        group_id=json.loads(values["groupId"]),
        at_ms=json.loads(values["atMs"]),
        total=int(values["total"]),
        counts={state: int(values.get(state, "0")) for state in GROUP_END_STATES},
    )
