"""Groups across the shards of a namespace (one shard: its own scripts do all of this).

A group's members live in their own tasks' shards; each shard keeps the group's counters
for its members (the same hash a one-shard book keeps). The group's *home* shard (that
of its id) also holds its declared total and whether it was notified. A summary sums the
shards' counters. A member that ends (or a ``seal_group``) is followed by a check: the
shards' counters are read together and, once the ended members reach the total, the home
shard writes the one group notification, guarded by its ``notified`` field (the home
shard's own script sets the same field when all members live there), so two checks that
both see the group ended write one notification.

The check follows the member's write (a second call): a process that dies between the
two leaves the notification to the next check of the group (its next member's end, or
``seal_group`` called again).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .._checks import require_limit, require_text
from .._jsrules import is_finite_number
from .._models import GROUP_END_STATES, AsyncTask, GroupSummary, group_summary
from ..errors import AsyncBookError
from ._args import number_text, utf8
from ._merged import MergedPlan, OnShards, asked, every, on
from ._namespace import Namespace
from ._plan import SETTLE, Plan, ScriptCall, command, server_time
from ._replies import listed, text_of
from ._script_args import GetManyArgs
from ._shard import Shard

__all__ = [
    "GROUP_FIELDS",
    "End",
    "after_batch",
    "after_ends",
    "check",
    "counters",
    "ends_of",
    "group_of",
    "group_members",
    "group",
    "summary_of",
    "tasks_in_order",
]

End = tuple[int, str, str, float | None]
"""A member a call ended: its position in the call, its group, its state, its time
(None: the server's clock)."""

GROUP_FIELDS = ("id", "total", "notified", "members", "prog", "queued", "running",
                "succeeded", "failed", "expired", "cancelled")  # fmt: skip
"""The group hash's fields a merged summary reads."""

_NOTIFY = """
if redis.call('HGET', KEYS[1], 'notified') then return 0 end
redis.call('HSET', KEYS[1], 'notified', '1')
local retention = tonumber(ARGV[2])
local fields = cjson.decode(ARGV[1])
if retention then
  local t = redis.call('TIME')
  local cut = math.max(tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - retention, 0)
  redis.call('XADD', KEYS[2], 'MINID', string.format('%.0f', cut), '*', unpack(fields))
  redis.call('PEXPIRE', KEYS[1], retention)
else
  redis.call('XADD', KEYS[2], '*', unpack(fields))
end
return 1
"""
"""KEYS: the home shard's group hash, its group notifications stream; ARGV: the
notification's fields (a JSON array), the retention ms ('' keeps). Writes it once."""


def read_counters(shard: Shard, group_id: str) -> Plan[dict[str, str]]:
    """One shard's counters of a group (absent fields left out)."""
    yield SETTLE
    values = yield command("hmget", shard.keys.group(group_id), *GROUP_FIELDS)
    pairs = zip(GROUP_FIELDS, values, strict=True)
    return {name: text_of(value) for name, value in pairs if value is not None}


def summary_of(
    group_id: str, home: dict[str, str], shards: Sequence[dict[str, str]]
) -> GroupSummary | None:
    """The group's summary: the shards' counters summed, the total from its home."""
    if not any(shards):
        return None
    fields: dict[str, int | None] = {}
    for each in shards:
        for name, value in each.items():
            if name not in ("id", "total", "notified"):
                fields[name] = (fields.get(name) or 0) + int(value)
    if "total" in home:
        fields["total"] = int(home["total"])
    return group_summary(group_id, fields)


def check(ns: Namespace, group_id: str, ends: Sequence[End] = ()) -> MergedPlan[bool]:
    """The group check (see above) after members ended (``ends``, in the call's order:
    a batch's, whose shards' parts ran at once) or a ``seal_group``: True if it wrote the
    notification, that of the end that reached the total as one after another would
    have written it (at its time, without the ends after it in its counts)."""
    index = ns.index_of(group_id)
    found = yield from counters(ns, group_id)
    if "total" not in found[index] or "notified" in found[index]:
        return False
    total = int(found[index]["total"])
    ended = {state: sum(int(each.get(state, "0")) for each in found) for state in GROUP_END_STATES}
    reached = sum(ended.values())
    if reached < total:
        return False
    at_ms: float | None = None  # no ends (a seal_group): the server's clock
    if ends:
        reaching = min(max(total - (reached - len(ends)), 1), len(ends)) - 1
        for _position, _group, state, _at_ms in ends[reaching + 1 :]:
            ended[state] -= 1
        at_ms = ends[reaching][3]
    at = (yield from on(index, server_time())) if at_ms is None else at_ms
    fields = ["groupId", json.dumps(group_id), "atMs", number_text(at), "total", str(total)]
    for state in GROUP_END_STATES:
        fields += [state, str(ended[state])]
    home = ns.shards[index]
    keys = (home.keys.group(group_id), home.keys.group_outbox)
    notify = command("eval", _NOTIFY, 2, *keys, json.dumps(fields), home.retention_ms)
    return bool((yield from on(index, asked(notify))))


def after_ends(
    ns: Namespace,
    index: int,
    results: Sequence[Any],
    task_ids: Sequence[Any],
    events: Sequence[Any] | None = None,
) -> MergedPlan[None]:
    """The group check after members of shard ``index`` ended (``after_batch``)."""
    if ns.count == 1:  # no group check across shards: not even the ends looked for
        return
    yield from after_batch(ns, ends_of(ns.shards[index], results, task_ids, events))


def after_batch(ns: Namespace, ends: Sequence[End]) -> MergedPlan[None]:
    """The group check of each group whose members ``ends`` names (ended by one call,
    on any shards), once all of them were written. None in a namespace of one shard,
    where the ending script itself writes the notification."""
    if ns.count == 1:
        return
    by_group: dict[str, list[End]] = {}
    for end in sorted(ends, key=lambda end: end[0]):
        by_group.setdefault(end[1], []).append(end)
    for group_id, its in by_group.items():
        yield from check(ns, group_id, its)


def ends_of(
    shard: Shard,
    results: Sequence[Any],
    task_ids: Sequence[Any],
    events: Sequence[Any] | None = None,
    positions: Sequence[int] | None = None,
) -> list[End]:
    """The members that these results of ``shard`` ended (``End``: the position of each
    in its call, from ``positions``, else in order)."""
    found: list[End] = []
    given = [None] * len(results) if events is None else events
    at = range(len(results)) if positions is None else positions
    rows = zip(at, task_ids, results, given, strict=True)
    for position, task_id, result, event in rows:
        if isinstance(result, AsyncBookError) or not isinstance(task_id, str):
            continue
        task = result.task
        group_id = group_of(shard, task_id) if result.changed and task.terminal else None
        if group_id is not None:
            found.append((position, group_id, task.state.value, _end_time(task, event)))
    return found


def _end_time(task: Any, event: Any) -> float | None:
    """When a member ended: the ``atMs`` of its event as given (a model or its mapping;
    a late event finds a task past its deadline: its time, not the deadline's), else its
    last history entry's, else (no history asked for) its deadline when it expired
    there; None: the server's clock."""
    at: Any = event.get("atMs") if isinstance(event, Mapping) else getattr(event, "at_ms", None)
    if is_finite_number(at):
        return float(at)
    if task.history:
        return float(task.history[-1].event.at_ms)
    return float(task.expires_at_ms) if task.state == "expired" else None


def group_of(shard: Shard, task_id: str) -> str | None:
    """The group id of a task this shard just wrote (its facts: a write succeeds only
    with the record's own facts), or None."""
    facts = shard.facts.get(task_id)
    if facts is None or not facts.group_json:
        return None
    value: Any = json.loads(facts.group_json)
    return value if isinstance(value, str) else None


def counters(ns: Namespace, group_id: str) -> MergedPlan[list[dict[str, str]]]:
    """Every shard's counters of a group, in shard order."""
    found: list[dict[str, str]] = yield every(
        ns.shards, lambda shard: read_counters(shard, group_id)
    )
    return found


def group(ns: Namespace, group_id: str) -> MergedPlan[GroupSummary | None]:
    """The group's counts by state and its progress: one round trip, O(1)."""
    group = utf8(require_text(group_id, "groupId"), "groupId")
    found = yield from counters(ns, group)
    return summary_of(group, found[ns.index_of(group)], found)


def group_members(ns: Namespace, group_id: str, limit: int = 100) -> MergedPlan[list[AsyncTask]]:
    """The group's members in creation order (without histories), up to ``limit``."""
    group_id = utf8(require_text(group_id, "groupId"), "groupId")
    count = require_limit(limit, maximum=10_000)
    pages = yield every(ns.shards, lambda shard: _member_rows(shard, group_id, count))
    rows = sorted(
        ((score, index, raw) for index, page in enumerate(pages) for raw, score in page),
        key=lambda row: row[0],
    )[:count]
    return list((yield from tasks_in_order(ns.shards, rows, full_task=False)))


def tasks_in_order(
    shards: Sequence[Shard], rows: Sequence[tuple[float, int, Any]], full_task: bool
) -> MergedPlan[tuple[AsyncTask, ...]]:
    """The tasks of (score, shard, id) rows, in the rows' order: one get_many per shard
    that holds any."""
    keys: dict[int, list[str]] = {}
    for _score, index, raw in rows:
        k = shards[index].keys
        keys.setdefault(index, []).extend((k.task(text_of(raw)), k.history(text_of(raw))))
    holding = tuple(keys)
    argv = GetManyArgs(full_task).argv()
    found = yield OnShards(
        tuple(asked(ScriptCall("get_many", keys[i], argv)) for i in holding), holding
    )
    by_id = {task.id: task for reply in found for task in listed(reply)}
    return tuple(by_id[text_of(raw)] for _s, _i, raw in rows if text_of(raw) in by_id)


def _member_rows(shard: Shard, group_id: str, count: int) -> Plan[list[tuple[Any, float]]]:
    yield SETTLE
    rows = yield command(
        "zrange", shard.keys.group_members(group_id), 0, count - 1, withscores=True
    )
    return [(raw, float(score)) for raw, score in rows]
