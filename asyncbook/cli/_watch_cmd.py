"""``asyncbook watch``: follow a task until it ends, through the book's change channel or
a status server's stream; a live bar on a terminal, the same facts as lines elsewhere,
JSON lines with ``--json``."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import click
from rich.progress import BarColumn, Progress, TaskID, TextColumn

from .._watch import Message
from ..redis import follow_task
from ._context import GroupOptions, book_errors, emit_json, json_option, rich_console, task_or_exit
from ._output_watch import OutputPrinter, follow_api_output, follow_book_output
from ._stream import follow_stream
from ._terminal import TerminalConsole, echo, shown

__all__ = ["COMMANDS"]


@click.command()
@click.argument("task_id")
@click.option(
    "--cursor",
    type=click.IntRange(0),
    default=0,
    help="The last version you saw (with --output: the last chunk).",
)
@click.option("--output", "output", is_flag=True, help="Print the task's output stream instead.")
@click.option(
    "--api",
    envvar="ASYNCBOOK_API_URL",
    default=None,
    help="Follow through a status server (its URL) instead of Redis (env ASYNCBOOK_API_URL).",
)
@click.option(
    "--token", envvar="ASYNCBOOK_API_TOKEN", default=None, help="The server's bearer token."
)
@json_option
@click.pass_obj
def watch(
    settings: GroupOptions,
    task_id: str,
    cursor: int,
    api: str | None,
    token: str | None,
    output: bool,
    as_json: bool,
) -> None:
    """Follow a task until it ends: a live progress bar (or JSON lines with --json).

    Follows the book's change channel on Redis, or with --api a status server's stream.
    When the connection drops it reconnects and resumes from the last version it saw, so
    nothing is skipped or shown twice. Without a terminal it prints a line per change
    (a progress report with its percent) and per new state, version or percent. Exits 0
    once the task has ended, whatever its state; 1 before printing anything when the
    task is unknown.

    With --output it prints the task's output as it is written (chunk text on stdout,
    each new attempt announced on stderr; JSON lines with --json) until the task ends.
    """

    def reconnecting(error: Exception) -> None:
        echo(f"connection lost ({error}); reconnecting", err=True)

    if output:
        printer = OutputPrinter(as_json)
        with book_errors():
            if api is not None:
                follow_api_output(api, task_id, cursor, printer, token, reconnecting)
            else:
                follow_book_output(settings.book, task_id, cursor, printer)
        return

    def follow(on_batch: Callable[[list[Message]], None]) -> None:
        with book_errors():
            if api is not None:
                follow_stream(
                    api, task_id, on_batch, cursor=cursor, token=token, on_reconnect=reconnecting
                )
            else:
                task_or_exit(settings, task_id)
                book = settings.book
                follow_task(book, task_id, on_batch, cursor=cursor, on_reconnect=reconnecting)

    if as_json:

        def print_batch(batch: list[Message]) -> None:
            for message in batch:
                emit_json({"event": message.event, "id": message.id, "data": message.data})

        follow(print_batch)
        return
    console = rich_console()
    with ExitStack() as stack:
        view = _Watching(task_id, console, stack)
        follow(view.show)
    if view.final:
        console.print(f"{task_id}: {view.final['state']} at v{view.final['version']}")


class _Watching:
    """What ``watch`` prints of each message: on a terminal a bar (started at the first
    message, so a task that cannot be followed prints nothing but its error), elsewhere
    lines with the same facts."""

    def __init__(self, task_id: str, console: TerminalConsole, stack: ExitStack) -> None:
        self.task_id = task_id
        self.console = console
        self.stack = stack
        self.progress: Progress | None = None
        self.bar: TaskID | None = None
        self.last_line = ""
        self.final: dict[str, Any] = {}

    def show(self, batch: list[Message]) -> None:
        for message in batch:
            data = message.data
            if message.event in ("task", "snapshot"):
                self._state(f"{self.task_id} {data['state']} v{data['version']}", data["progress"])
            elif message.event == "change":
                event = data["event"]
                line = f"v{data['version']} {event['type']}"
                if "progress" in event:
                    line += f" {event['progress']:g}%"
                self._print(line)
            elif message.event == "end":
                self.final.update(data)

    def _state(self, label: str, percent: float) -> None:
        if not self.console.is_terminal:
            line = f"{label} {percent:g}%"
            if line != self.last_line:
                self._print(line)
                self.last_line = line
            return
        progress, bar = self._bar()
        progress.update(bar, completed=percent, description=shown(label))

    def _print(self, line: str) -> None:
        if self.console.is_terminal:
            self._bar()[0].console.print(line)
        else:
            self.console.print(line)

    def _bar(self) -> tuple[Progress, TaskID]:
        if self.progress is None or self.bar is None:
            columns = (
                TextColumn("{task.description}", markup=False),
                BarColumn(),
                TextColumn("{task.percentage:>3.0f}%"),
            )
            progress = Progress(*columns, console=self.console, transient=False)
            self.progress = self.stack.enter_context(progress)
            self.bar = self.progress.add_task(shown(self.task_id), total=100)
        return self.progress, self.bar


COMMANDS = (watch,)
"""The commands this module adds to the ``asyncbook`` group."""
