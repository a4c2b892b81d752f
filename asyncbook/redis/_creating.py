"""create.lua's call for one ``CreateSpec``, built from the shard: the task it would
store, its KEYS and its ARGV record (``create``, ``create_many``, the create sender, a
resend's create), with the publisher's facts checked (text, bounded, valid Unicode), and
the one reading of its answer (``created_on``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .._book import CreateSpec
from .._checks import require_heartbeat_timeout, require_text
from .._console import TEXT_LIMIT, TRACE_LIMIT, PublishInfo
from .._machine import create_async_task
from .._models import AsyncTask
from ..errors import invalid, task_exists
from ._args import dumps, number_text, utf8
from ._facts import TaskFacts
from ._replies import status_of
from ._script_args import CreateArgs
from ._scripts import ScriptStatus
from ._shard import Shard

__all__ = ["create_args", "created_on", "life_and_retention_ms"]


def created_on(
    shard: Shard, task_id: str, task: AsyncTask, reply: Sequence[Any], args: CreateArgs
) -> AsyncTask:
    """create.lua's answer: the new task, or the stored one (``exist_ok``); the spec's
    facts learned only if it stored the task: the stored task's may differ (another
    group, deadline), and a batch's call with the spec's would be refused for facts."""
    status = status_of(task_id, reply)
    if status == ScriptStatus.CONFLICT:
        raise task_exists(task_id)
    if status == ScriptStatus.EXISTS:
        return AsyncTask.model_validate_json(reply[1])
    if status == ScriptStatus.CREATED:
        shard.facts.learn(task_id, TaskFacts(args.name, args.group_id_json, "", args.deadline))
    return task


def create_args(shard: Shard, spec: CreateSpec) -> tuple[AsyncTask, list[str], CreateArgs]:
    """The task create.lua would store, the script's KEYS and its ARGV record (the shard
    learns the spec's facts once the task is stored: ``created_on``)."""
    id = spec.id
    group = None
    if spec.group_id is not None:
        group = utf8(require_text(spec.group_id, "groupId"), "groupId")
    task = create_async_task(
        id=id, now_ms=spec.now_ms, ttl_ms=spec.ttl_ms, max_attempts=spec.max_attempts
    )
    timeout = require_heartbeat_timeout(spec.heartbeat_timeout_ms)
    k = shard.keys
    keys = [
        k.task(id),
        k.history(id),
        k.index_changes,
        k.deadlines,
        k.sequence,
        k.group(group or ""),
        k.group_members(group or ""),
    ]
    published = _publish_fields(spec.info)
    parent = published.get("parent_id", "")
    keys += [k.info(id), k.children(parent), k.message(id)]
    children = "parent_id" in published  # its parent's children set outlives it
    args = CreateArgs(
        task_id=id,
        task_id_json=dumps(id, "id"),
        deadline=number_text(task.expires_at_ms),
        max_attempts=task.max_attempts,
        exist_ok=spec.exist_ok,
        changes_channel=k.changes_channel,
        heartbeat_timeout_ms=timeout,
        retry_on_stall=bool(spec.retry_on_stall),
        group_id_json="" if group is None else dumps(group, "groupId"),
        created_ms=number_text(spec.now_ms),
        children_keep_ms=life_and_retention_ms(shard, spec) if children else "",
        message_keep_ms=life_and_retention_ms(shard, spec) if published.get("message") else "",
        **published,
    )
    return task, keys, args


def life_and_retention_ms(shard: Shard, spec: CreateSpec) -> str:
    """The longest a task's record can live: its ttl and the retention; '' for ever."""
    if not shard.retention_ms:
        return ""
    return str(int(shard.retention_ms) + max(0, math.ceil(float(spec.ttl_ms))))


def _publish_fields(given: PublishInfo | None) -> dict[str, str]:
    """create.lua's info ARGV for what the publisher gave (checked: text, bounded; the
    kept message as ``KeptMessage.to_json`` writes it; the trace context ASCII)."""
    if given is None:
        return {}
    if not isinstance(given, PublishInfo):
        raise invalid("info must be a PublishInfo", field="info")
    fields: dict[str, str] = {}
    for field, value in vars(given).items():
        if value is None:
            continue
        if field == "message":
            if not isinstance(value, str) or not value.isascii():
                raise invalid(
                    "info.message must be KeptMessage.to_json's text", field="info.message"
                )
            fields[field] = value
        elif field == "trace":
            if not isinstance(value, str) or not value.isascii() or len(value) > TRACE_LIMIT:
                raise invalid(
                    f"info.trace must be ASCII text of at most {TRACE_LIMIT} characters",
                    field="info.trace",
                )
            fields[field] = value
        elif not isinstance(value, str) or len(value) > TEXT_LIMIT:
            raise invalid(
                f"info.{field} must be text of at most {TEXT_LIMIT} characters",
                field=f"info.{field}",
            )
        else:
            fields[field] = utf8(value, f"info.{field}")
    return fields
