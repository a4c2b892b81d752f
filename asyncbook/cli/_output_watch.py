"""``asyncbook watch ID --output``: a task's output as it is written, until the task
ends, read from Redis or (``--api``) a status server's output stream; each resumes from
the last chunk it printed after a dropped connection."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from .._output import OutputChunk
from .._watch import Message
from ..redis import RedisBook
from ._context import emit_json
from ._stream import follow_stream
from ._terminal import echo, shown

__all__ = ["OutputPrinter", "follow_book_output", "follow_api_output"]

WAIT_MS = 1000
"""How long one wait for the next chunk blocks before the task's state is read again."""


class OutputPrinter:
    """Prints chunks: their text (a line to stderr when a new attempt begins),
    or with ``as_json`` one JSON line per chunk and one for the end."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.attempt = 0

    def chunk(self, chunk: dict[str, Any]) -> None:
        if self.as_json:
            emit_json({"event": "output", **chunk})
            return
        if chunk["attempt"] != self.attempt:
            if self.attempt:
                click.echo("")
            echo(f"[attempt {chunk['attempt']}]", err=True)
            self.attempt = chunk["attempt"]
        click.echo(shown(chunk["chunk"], lines=True), nl=False)  # control characters escaped

    def end(self, data: dict[str, Any]) -> None:
        if self.as_json:
            emit_json({"event": "end", **data})
        else:
            click.echo("")
            echo(f"[{data['taskId']}: {data['state']}, {data['cursor']} chunks]", err=True)


def follow_book_output(book: RedisBook, task_id: str, cursor: int, printer: OutputPrinter) -> None:
    """Read the task's output from the book until it has ended."""
    while True:
        page = book.output(task_id, cursor)
        for chunk in page.chunks:
            printer.chunk(_wire(chunk))
        cursor = page.cursor
        if page.done:
            printer.end({"taskId": task_id, "state": page.state, "cursor": cursor})
            return
        if not page.chunks:
            book.wait_output(task_id, cursor, WAIT_MS)


def follow_api_output(
    api: str,
    task_id: str,
    cursor: int,
    printer: OutputPrinter,
    token: str | None,
    on_reconnect: Callable[[Exception], None],
) -> None:
    """Follow the status server's output stream (``Last-Event-ID`` on a reconnect)."""

    def on_batch(batch: list[Message]) -> None:
        for message in batch:
            if message.event == "output":
                printer.chunk(message.data)
            elif message.event == "end":
                printer.end(message.data)

    follow_stream(
        api,
        task_id,
        on_batch,
        cursor=cursor,
        token=token,
        on_reconnect=on_reconnect,
        stream="output-stream",
    )


def _wire(chunk: OutputChunk) -> dict[str, Any]:
    return chunk.model_dump(by_alias=True)
