"""``asyncbook audit``: who cancelled (or resent) what, when and why; and the actor the
command's own changes are recorded as (``cli:<login name>``)."""

from __future__ import annotations

import getpass
from collections.abc import Callable

import click
from click.decorators import FC
from rich.table import Table

from .._audit import MAX_AUDIT_PAGE, AuditEntry
from .._models import to_wire
from ._console_units import when, when_option
from ._context import GroupOptions, book_errors, emit_json, json_option, rich_console
from ._terminal import cell

__all__ = ["COMMANDS", "actor_option", "cli_actor"]


def cli_actor() -> str:
    """``cli:<the login name>``: who a change made from this command is recorded as."""
    try:
        return f"cli:{getpass.getuser()}"
    except (OSError, KeyError):  # no login name (a container without a passwd entry)
        return "cli:unknown"


def actor_option(what: str) -> Callable[[FC], FC]:
    """The ``--actor`` option of a command that changes the book: ``what`` (the rest of
    its help) is what the audit trail records under that actor."""
    return click.option(
        "--actor",
        default=cli_actor,
        show_default="cli:<login name>",
        help=f"Who the audit trail records {what}.",
    )


def _table(entries: list[AuditEntry]) -> Table:
    table = Table(box=None)
    for column in ("when (UTC)", "who", "action", "task", "outcome", "reason"):
        table.add_column(column, overflow="fold")
    for entry in entries:
        outcome = entry.outcome
        if entry.retried_as is not None:
            outcome += f" as {entry.retried_as}"
        table.add_row(
            when(entry.at_ms),
            cell(entry.actor),
            cell(entry.action),
            cell(entry.task_id),
            cell(outcome),
            cell(entry.reason or ""),
        )
    return table


@click.command()
@click.argument("task_id", required=False)
@click.option(
    "--since",
    "since_ms",
    callback=when_option,
    metavar="WHEN",
    help="Entries at or after: a duration back from now (10m, 2h, 1d), ms or ISO 8601.",
)
@click.option(
    "--limit",
    type=click.IntRange(1, MAX_AUDIT_PAGE),
    default=100,
    show_default=True,
    help="At most this many entries.",
)
@json_option
@click.pass_obj
def audit(
    settings: GroupOptions, task_id: str | None, since_ms: int | None, limit: int, as_json: bool
) -> None:
    """Show the audit trail, newest first: every task's, or TASK_ID's (who, when, what,
    the task, the book's answer, why). Cancels and resends from the page, the API and this
    command are recorded, each with its actor; a resend's answer names the new task."""
    with book_errors():
        entries = settings.book.audit(task_id, since_ms=since_ms, limit=limit)
    if as_json:
        emit_json({"entries": [to_wire(entry) for entry in entries]})
        return
    if not entries:
        click.echo("no audit entries")
        return
    rich_console().print(_table(entries))


COMMANDS = (audit,)
"""The commands this module adds to the ``asyncbook`` group."""
