"""Output streams (extension, ``asyncbook._output``) as plans: an append is one
output.lua call in the task's shard; a read is one pipeline there (the task's state and
attempt, then the stream's entries after the cursor: nothing is appended once the task
has ended, so a page that sees it ended holds its last chunks); a follower's wait is a
blocking XREAD of the task's stream."""

from __future__ import annotations

from typing import Any

from .._checks import require_limit, require_string
from .._output import (
    OUTPUT_TASK_MAX_BYTES,
    OUTPUT_TASK_MAX_CHUNKS,
    OutputAppend,
    OutputChunk,
    OutputPage,
    output_page,
    refused_append,
    require_chunks,
    require_output_cursor,
)
from ..errors import DamagedRecordError, UnknownTaskError
from ._args import utf8
from ._merged import MergedPlan, OneShard, on, writing
from ._namespace import Namespace
from ._operations import before_write
from ._plan import SETTLE, Pipeline, Plan, ScriptCall, command
from ._replies import status_of, text_of
from ._script_args import OutputArgs

__all__ = ["append_output", "output", "wait_output"]


def append_output(ns: Namespace, task_id: str, *chunks: str) -> MergedPlan[OutputAppend]:
    """Append chunks to a running task's output stream, each labelled with the task's
    attempt, in one script call; a refused append (unknown task, not running, a chunk
    too big, the output full: ``asyncbook._output``'s bounds) writes nothing."""
    task_id = utf8(require_string(task_id, "taskId"), "taskId")
    values = require_chunks(chunks)
    index = yield from writing(ns, task_id)
    return (yield from on(index, _append(ns, index, task_id, values)))


def _append(ns: Namespace, index: int, task_id: str, values: list[str]) -> Plan[OutputAppend]:
    shard = ns.shards[index]
    yield SETTLE
    yield from before_write(shard)
    argv = OutputArgs(shard.retention_ms, OUTPUT_TASK_MAX_CHUNKS, OUTPUT_TASK_MAX_BYTES).argv()
    keys = [shard.keys.task(task_id), shard.keys.output(task_id)]
    reply = yield ScriptCall("output", keys, argv + values)
    status = status_of(task_id, reply) if isinstance(reply[0], bytes | str) else ""
    if status in ("!state", "!full"):
        state = text_of(reply[1]) if status == "!state" else "running"
        held = (0, 0) if status == "!state" else (int(reply[1]), int(reply[2]))
        error = refused_append(task_id, state, held, values)
        assert error is not None
        raise error
    return OutputAppend(cursor=int(reply[0]), attempt=int(reply[1]), total_bytes=int(reply[2]))


def output(
    ns: Namespace, task_id: str, cursor: int | str = 0, limit: int = 1000
) -> OneShard[OutputPage]:
    """Up to ``limit`` chunks of the task's output after ``cursor`` (a chunk's ``seq``,
    or its text; 0: from the first), each with the attempt that wrote it."""
    task_id = utf8(require_string(task_id, "taskId"), "taskId")
    index = ns.index_of(task_id)
    return OneShard(index, _read(ns, index, task_id, cursor, limit))


def _read(ns: Namespace, index: int, task_id: str, cursor: Any, limit: Any) -> Plan[OutputPage]:
    after = require_output_cursor(cursor)
    count = require_limit(limit)
    keys = ns.shards[index].keys
    yield SETTLE
    found, entries = yield Pipeline(
        [
            command("hmget", keys.task(task_id), "id", "st", "att", "seq"),
            command("xrange", keys.output(task_id), f"(0-{after}", "+", count),
        ]
    )
    if found[0] is None:
        raise UnknownTaskError(task_id)
    if found[1] is None or found[2] is None:
        raise DamagedRecordError(task_id, "its hash lacks fields")
    state, attempt, order = text_of(found[1]), int(found[2]), found[3]
    chunks = []
    for entry_id, fields in entries:
        held = {text_of(name): value for name, value in fields.items()}
        if text_of(held.get("s", b"")) != text_of(order or b""):
            break  # a stream an earlier task of this id left: not this task's output
        chunks.append(  # the script's own values: built without validation (hot path)
            OutputChunk.model_construct(
                seq=int(text_of(entry_id).partition("-")[2]),
                attempt=int(held["a"]),
                at_ms=int(held["t"]),
                chunk=text_of(held["c"]),
            )
        )
    return output_page((task_id, state, attempt), chunks, after, count)


def wait_output(ns: Namespace, task_id: str, cursor: int, block_ms: int) -> OneShard[bool]:
    """Wait up to ``block_ms`` for a chunk after ``cursor`` (a blocking XREAD): True if
    one is there. (A follower's wait between reads; ``follow_output``.)"""
    task_id = utf8(require_string(task_id, "taskId"), "taskId")
    index = ns.index_of(task_id)
    key = ns.shards[index].keys.output(task_id)
    return OneShard(index, _wait(key, require_output_cursor(cursor), block_ms))


def _wait(key: str, cursor: int, block_ms: int) -> Plan[bool]:
    found = yield command("xread", {key: f"0-{cursor}"}, count=1, block=block_ms)
    return bool(found)
