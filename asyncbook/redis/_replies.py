"""Reading what ``RedisBook``'s scripts answer: statuses, tasks, results and summaries.

A script's first element is its status (``ScriptStatus``, or the reason of an applied
event); an unknown or damaged task raises the same errors for every script.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from typing import Any

from redis.exceptions import ResponseError

from .._models import AsyncTask, CallbackResult
from .._reasons import Reason
from ..errors import AsyncBookError, DamagedRecordError, UnknownTaskError, invalid
from ._scripts import EventOutcome, ScriptStatus

__all__ = [
    "callback_result",
    "listed",
    "outcome",
    "script_error",
    "status_of",
    "text_of",
]

log = logging.getLogger(__name__)


def text_of(raw: bytes | str) -> str:
    """A reply's bytes as text (a client with ``decode_responses`` gives text already)."""
    return raw.decode("utf-8") if isinstance(raw, bytes) else raw


def status_of(task_id: str, reply: Sequence[Any]) -> str:
    """A script's status (its first element); an unknown or damaged task raises here."""
    status = text_of(reply[0])
    if status == ScriptStatus.UNKNOWN:
        raise UnknownTaskError(task_id)
    if status == ScriptStatus.DAMAGED:
        raise DamagedRecordError(task_id, text_of(reply[1]))
    return status


def task_of_parts(parts: Sequence[Any]) -> AsyncTask:
    """The task a script answered as parts (``task_parts`` in _task.lua): the same JSON
    ``render_task`` writes, built here so that the script builds none."""
    id_json, state, deadline = text_of(parts[0]), text_of(parts[1]), text_of(parts[2])
    error, result = text_of(parts[7]), text_of(parts[8])
    entries = [text_of(entry) for entry in parts[9:]]
    out = [
        '{"id":', id_json, ',"state":"', state, '","expiresAtMs":', deadline,
        ',"attempts":', str(parts[3]), ',"maxAttempts":', str(parts[4]),
        ',"progress":', str(parts[5]), ',"version":', str(parts[6]),
    ]  # fmt: skip
    if state == "succeeded":
        event = json.loads(entries[-1] if entries else result)
        out += [',"resultRef":', json.dumps(event.get("resultRef"))]
        out += [',"resultHash":', json.dumps(event.get("resultHash"))]
    if error:
        out += [',"error":', error]
    out.append(',"history":[')
    out.append(",".join(f'{{"version":{n},"event":{e}}}' for n, e in enumerate(entries, 1)))
    out.append("]}")
    return AsyncTask.model_validate_json("".join(out))


def _answered(
    task_id: str, reply: Sequence[Any], shape_error: AsyncBookError | None
) -> tuple[str, list[bool]]:
    """An applied event's status and its flags (changed, duplicate, notify, duplicate
    callback), or the error it met raised."""
    status = status_of(task_id, reply)
    if status == ScriptStatus.SHAPE:
        assert shape_error is not None
        raise shape_error
    if status == ScriptStatus.INVALID:
        raise invalid(text_of(reply[2]), field=text_of(reply[1]))
    return status, [flag == "1" for flag in text_of(reply[1])[:4]]


def callback_result(
    task_id: str, reply: Sequence[Any], shape_error: AsyncBookError | None
) -> CallbackResult:
    """apply.lua's answer to one event, or the error it met raised."""
    status, (changed, duplicate, notify, callback) = _answered(task_id, reply, shape_error)
    return CallbackResult(
        task=task_of_parts(reply[2:]),
        changed=changed,
        duplicate=duplicate,
        notify=notify,
        reason=Reason(status),
        duplicate_callback=callback,
    )


def outcome(
    task_id: str, answer: Sequence[Any], shape_error: AsyncBookError | None
) -> EventOutcome | AsyncBookError:
    """apply_event's compact answer to one event, or the error it met."""
    try:
        status, (changed, duplicate, notify, callback) = _answered(task_id, answer, shape_error)
    except AsyncBookError as error:
        return error
    error_json = text_of(answer[3])
    text = json.loads(error_json) if error_json else None
    return EventOutcome(status, changed, duplicate, notify, callback, text_of(answer[2]), text)


def script_error(error: ResponseError) -> bool:
    """True for an error raised while a script ran (one item), not a refusal of the call."""
    text = str(error)
    return any(word in text for word in ("user_script", "user_function", "Error running script"))


def listed(found: Sequence[Any]) -> Iterable[AsyncTask]:
    """The listed tasks; a damaged record is skipped (and logged), never fails the page."""
    for raw in found:
        if not raw:
            continue
        text = text_of(raw)
        if text.startswith("!damaged:"):
            log.warning("asyncbook: a listed task's record is damaged (%s); skipped", text[9:])
            continue
        yield AsyncTask.model_validate_json(raw)
