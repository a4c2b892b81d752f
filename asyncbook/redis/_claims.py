"""Global callback ids and idempotency keys on a sharded namespace.

An id whose home (``_shards.home_of``) is in its task's shard needs nothing here: the
task's script checks and records it in the same call, as on one shard. Any other id is
*claimed* in its home's shard first:

1. ``SET <home>:c:<id> @<task id> NX GET``: the id is new (claimed now), the task's own
   (claimed before: a redelivery, or a claimer that died before its apply), or another
   task's. A value ``1`` is a marker its home's task wrote applying it in one call.
2. New or the task's own: the apply runs in the task's shard with the id's marker there;
   that marker decides a redelivery atomically, as on one shard.
3. Another task's: if that task's marker is there, the id was applied: the answer is
   ``duplicate-callback`` (the apply is told ``taken``). If not, that task's apply is
   still running or failed: the claim is read again for a short while, until the marker
   shows up or the claim is released.
4. An apply that raised (an unknown task, a bad event) releases a claim it made, so the
   id is free again, as the reference leaves it.

Deliveries read the task first (a succeeded task never changes again), then decide in
the key's home shard in one script call: an existing receipt answers first, then an
unknown or unsucceeded task, else the receipt is written.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any

from .._models import AsyncTask, DeliveryResult
from . import _operations as operations
from ._plan import Plan, command
from ._replies import text_of
from ._shard import Shard

__all__ = ["Claim", "claim", "deliver_known", "release"]

_OWNER = "@"
"""A claim's value starts with this, then the task id that claimed it."""

_CLAIM_SECONDS_BEYOND_RETENTION = 7 * 86_400
"""A claim outlives the book's retention by a week (the task's life is not known when it
is claimed): a redelivery later than that is refused by the task's own marker's expiry
rules no differently than on one shard."""


class Claim(StrEnum):
    """What claiming an id for a task found."""

    NEW = "new"
    """Nobody held it: it is the task's now."""
    MINE = "mine"
    """The task held it already."""
    TAKEN = "taken"
    """Another task holds it."""


def claim(home: Shard, identifier: str, task_id: str) -> Plan[tuple[Claim, str]]:
    """Claim ``identifier`` for ``task_id`` in its home shard: (what was found, the
    holder's task id, '' when the holder is a marker)."""
    options: dict[str, Any] = {"nx": True, "get": True}
    if home.retention_ms:
        options["ex"] = int(home.retention_ms) // 1000 + _CLAIM_SECONDS_BEYOND_RETENTION
    found = yield command("set", home.keys.callback(identifier), _OWNER + task_id, **options)
    if found is None:
        return Claim.NEW, task_id
    text = text_of(found)
    if text == _OWNER + task_id:
        return Claim.MINE, task_id
    return Claim.TAKEN, text[len(_OWNER) :] if text.startswith(_OWNER) else ""


_RELEASE = (
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
)


def release(home: Shard, identifier: str, task_id: str) -> Plan[None]:
    """Release a claim ``task_id`` made (only if it still holds it)."""
    yield command("eval", _RELEASE, 1, home.keys.callback(identifier), _OWNER + task_id)


_DELIVER_KNOWN = """
local existing = redis.call('GET', KEYS[1])
if existing then return {'existing', existing} end
if ARGV[1] == 'unknown' then return {'!unknown'} end
if ARGV[1] == 'damaged' then return {'!damaged', ARGV[2]} end
if ARGV[1] ~= 'succeeded' then return {'not-succeeded'} end
local retention = tonumber(ARGV[3])
if retention then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', retention)
else
  redis.call('SET', KEYS[1], ARGV[2])
end
return {'delivered', ARGV[2]}
"""
"""deliver.lua's decision with the task read beforehand. KEYS: the receipt; ARGV: the
task's state (or 'unknown', 'damaged'), the receipt to write (or why it is damaged),
the retention ms ('' keeps)."""


def deliver_known(
    home: Shard,
    task_id: str,
    key: str,
    task: AsyncTask | None,
    damaged: str | None,
    now_text: str,
) -> Plan[DeliveryResult]:
    """deliver.lua's answer for a task read in another shard (``task`` None: unknown)."""
    if damaged is not None:
        state, payload = "damaged", damaged
    elif task is None:
        state, payload = "unknown", ""
    else:
        state = task.state
        payload = (
            '{"taskId":' + json.dumps(task.id) + ',"resultRef":' + json.dumps(task.result_ref)
            + ',"resultHash":' + json.dumps(task.result_hash) + ',"idempotencyKey":'
            + json.dumps(key) + ',"deliveredAtMs":' + now_text + "}"
        )  # fmt: skip
    yield from operations.before_write(home)
    reply = yield command(
        "eval", _DELIVER_KNOWN, 1, home.keys.delivery(key), state, payload, home.retention_ms
    )
    return operations.delivery_of(task_id, reply)
