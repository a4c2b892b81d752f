"""Output streams (extension): what a running task produces while it runs (tokens,
partial transcripts, log lines), appended chunk by chunk and read from a cursor.

A task's output is one sequence of chunks across its attempts; chunk N (from 1) carries
the attempt that wrote it. The cursor is the number of the last chunk a reader holds
(0: none), so a reader that comes back with its cursor gets every chunk after it, with
no gap and no repeat. Only a running task takes output; the bounds below are checked
before anything is written, and a refused append writes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import StrictInt, StrictStr

from ._checks import require_integer, require_limit
from ._models import TERMINAL_STATES, AsyncTask, Number, WireModel
from .errors import AsyncBookError, UnknownTaskError, invalid

__all__ = [
    "OUTPUT_BATCH_MAX",
    "OUTPUT_CHUNK_MAX_BYTES",
    "OUTPUT_TASK_MAX_BYTES",
    "OUTPUT_TASK_MAX_CHUNKS",
    "MemoryOutputs",
    "OutputAppend",
    "OutputChunk",
    "OutputPage",
    "output_page",
    "refused_append",
    "require_chunks",
    "require_output_cursor",
]

OUTPUT_CHUNK_MAX_BYTES = 64 * 1024
"""The largest chunk, in UTF-8 bytes."""
OUTPUT_BATCH_MAX = 1000
"""The most chunks one append call takes."""
OUTPUT_TASK_MAX_BYTES = 8 * 1024 * 1024
"""The most output a task keeps, in UTF-8 bytes over all its attempts."""
OUTPUT_TASK_MAX_CHUNKS = 100_000
"""The most chunks a task keeps over all its attempts."""


class OutputChunk(WireModel):
    """One chunk of a task's output: its number (the cursor after it), the attempt that
    wrote it, when it was stored (ms, the book's clock) and its text."""

    seq: StrictInt
    attempt: StrictInt
    at_ms: Number
    chunk: StrictStr


class OutputPage(WireModel):
    """The chunks after a cursor, with where to go on from and whether more can come."""

    task_id: StrictStr
    state: StrictStr
    attempt: StrictInt
    """The task's current attempt (0 before its first start)."""
    chunks: tuple[OutputChunk, ...]
    cursor: StrictInt
    """The last chunk's number on this page, or the cursor asked for if none."""
    done: bool
    """The task has ended and this page holds its last chunk: nothing more will come."""


class OutputAppend(WireModel):
    """What an append stored: the number of its last chunk, the attempt it belongs to and
    the task's output size so far (UTF-8 bytes)."""

    cursor: StrictInt
    attempt: StrictInt
    total_bytes: StrictInt


def require_chunks(chunks: Any) -> list[str]:
    """Chunks to append: a non-empty list (at most ``OUTPUT_BATCH_MAX``) of non-empty
    strings of at most ``OUTPUT_CHUNK_MAX_BYTES`` each, or raise naming ``chunk``."""
    if isinstance(chunks, str) or not isinstance(chunks, Iterable):
        raise invalid("chunks must be a list of strings", field="chunk")
    found = list(chunks)
    if not found or len(found) > OUTPUT_BATCH_MAX:
        raise invalid(f"an append takes 1 to {OUTPUT_BATCH_MAX} chunks", field="chunk")
    for chunk in found:
        if not isinstance(chunk, str) or not chunk:
            raise invalid("chunk must be a non-empty string", field="chunk")
        try:
            size = len(chunk.encode("utf-8"))
        except UnicodeEncodeError:
            raise invalid("chunk must be valid UTF-8 text", field="chunk") from None
        if size > OUTPUT_CHUNK_MAX_BYTES:
            raise invalid(f"chunk must be at most {OUTPUT_CHUNK_MAX_BYTES} bytes", field="chunk")
    return found


def require_output_cursor(cursor: Any) -> int:
    """A cursor: an integer >= 0, or its decimal text (an SSE ``Last-Event-ID``)."""
    if isinstance(cursor, str) and cursor.isascii() and cursor.isdigit() and len(cursor) < 12:
        cursor = int(cursor)
    return require_integer(cursor, "cursor")


def refused_append(
    task_id: str, state: str | None, held: tuple[int, int], adding: list[str]
) -> AsyncBookError | None:
    """Why an append to a task in ``state`` (None: unknown) holding ``held`` (chunks,
    bytes) cannot take ``adding``, or None."""
    if state is None:
        return UnknownTaskError(task_id)
    if state != "running":
        return invalid(
            f"task {task_id!r} is {state}: only a running task takes output", field="taskId"
        )
    size = sum(len(chunk.encode("utf-8")) for chunk in adding)
    if held[0] + len(adding) > OUTPUT_TASK_MAX_CHUNKS or held[1] + size > OUTPUT_TASK_MAX_BYTES:
        return invalid(
            f"task {task_id!r}'s output is full ({OUTPUT_TASK_MAX_CHUNKS} chunks or "
            f"{OUTPUT_TASK_MAX_BYTES} bytes)",
            field="chunk",
        )
    return None


def output_page(
    task: tuple[str, str, int], chunks: list[OutputChunk], cursor: int, limit: int
) -> OutputPage:
    """The page of ``chunks`` (those after ``cursor``, at most ``limit``) of a task (its
    id, state and attempt)."""
    task_id, state, attempt = task
    last = chunks[-1].seq if chunks else cursor
    done = state in TERMINAL_STATES and len(chunks) < limit
    return OutputPage(
        task_id=task_id,
        state=state,
        attempt=attempt,
        chunks=tuple(chunks),
        cursor=last,
        done=done,
    )


class MemoryOutputs:
    """``MemoryBook``'s output streams: a list of chunks and a byte count per task (the
    caller holds its lock)."""

    def __init__(self) -> None:
        self._chunks: dict[str, list[OutputChunk]] = {}
        self._bytes: dict[str, int] = {}

    def append(self, task: AsyncTask | None, task_id: str, chunks: Any, now: int) -> OutputAppend:
        adding = require_chunks(chunks)
        held = self._chunks.setdefault(task_id, []) if task is not None else []
        size = self._bytes.get(task_id, 0)
        state = None if task is None else task.state
        error = refused_append(task_id, state, (len(held), size), adding)
        if error is not None:
            raise error
        assert task is not None
        for chunk in adding:
            held.append(
                OutputChunk(seq=len(held) + 1, attempt=task.attempts, at_ms=now, chunk=chunk)
            )
            size += len(chunk.encode("utf-8"))
        self._bytes[task_id] = size
        return OutputAppend(cursor=len(held), attempt=task.attempts, total_bytes=size)

    def read(self, task: AsyncTask, cursor: int | str, limit: int) -> OutputPage:
        after = require_output_cursor(cursor)
        count = require_limit(limit)
        chunks = self._chunks.get(task.id, [])[after : after + count]
        return output_page((task.id, task.state, task.attempts), chunks, after, count)
