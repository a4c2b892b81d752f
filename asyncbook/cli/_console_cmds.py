"""The console's commands about tasks: ``status`` with the task's info and ``ls`` with the
search's filters (``_commands`` adds them, and ``_console_stats``' ``workers`` and
``stats``, to the ``asyncbook`` group). Times are printed in UTC."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import click
from rich.table import Table

from .._console import SearchRow, TaskInfo, TaskQuery
from .._models import STATE_NAMES, AsyncTask, to_wire
from .._task_csv import csv_text
from .._watch import task_summary
from ._console_units import naming_options, now_ms, span, when, when_option
from ._context import GroupOptions, book_errors, emit_json, json_option, rich_console, task_or_exit
from ._ls_output import jsonl_text, page_body
from ._terminal import cell, shown

__all__ = ["COMMANDS"]


def _totals_line(totals: Mapping[str, int], exact: bool = True) -> str:
    line = "  ".join(f"{state} {totals.get(state, 0)}" for state in STATE_NAMES)
    line += f"  (total {sum(totals.values())})"
    return line if exact else line + ", counted over the first candidates only"


@click.command()
@click.argument("task_id")
@json_option
@click.pass_obj
def status(settings: GroupOptions, task_id: str, as_json: bool) -> None:
    """Show one task (state, progress, version, attempts, result), then its info
    (name, arguments, queue, worker, times, runtime, and a failure's traceback)."""
    task = task_or_exit(settings, task_id)
    with book_errors():
        info = settings.book.info(task_id)
    if as_json:
        emit_json({**task_summary(task), "info": None if info is None else to_wire(info)})
        return
    console = rich_console()
    console.print(_summary_table(task, now_ms()))
    if info is not None:
        console.print()
        console.print(_info_table(info))


def _deadline(expires_at_ms: float, now_ms: int) -> str:
    """A deadline for people: ISO 8601 in UTC, and how far off it is."""
    moment = datetime.fromtimestamp(expires_at_ms / 1000, UTC).isoformat(timespec="seconds")
    moment = moment.replace("+00:00", "Z")
    if expires_at_ms >= now_ms:
        return f"{moment} (in {span(expires_at_ms - now_ms)})"
    return f"{moment} ({span(now_ms - expires_at_ms)} ago)"


def _summary_table(task: AsyncTask, now_ms: int) -> Table:
    """The task without its history; the deadline as a time (``--json`` keeps the ms)."""
    table = Table(show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    for key, value in task_summary(task).items():
        if key == "expiresAtMs":
            table.add_row("deadline", _deadline(value, now_ms))
        else:
            table.add_row(key, cell(value))
    return table


def _info_table(info: TaskInfo) -> Table:
    table = Table(show_header=False, box=None, title="info", title_justify="left")
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    rows: list[tuple[str, str | None]] = [
        ("name", info.name),
        ("args", info.args_repr),
        ("kwargs", info.kwargs_repr),
        ("queue", info.queue),
        ("worker", info.worker),
        ("group", info.group_id),
        ("parent", info.parent_id),
        ("root", info.root_id),
        ("children", ", ".join(info.children) or None),
        ("created", when(info.created_at_ms) or None),
        ("started", when(info.started_at_ms) or None),
        ("ended", when(info.ended_at_ms) or None),
        ("runtime", span(info.runtime_ms) or None),
        ("retries", None if info.retries is None else str(info.retries)),
        ("exception", info.exception),
        ("traceback", info.traceback),
    ]
    for key, value in rows:
        if value is not None:  # escaped, never rich markup; a traceback keeps its lines
            table.add_row(key, cell(value, lines=key == "traceback"))
    return table


@click.command("ls")
@click.option("--state", type=click.Choice(STATE_NAMES), help="Only tasks in this state.")
@click.option("--name", help="Only tasks of this Celery task name.")
@click.option("--worker", help="Only tasks that ran on this worker.")
@click.option(
    "--q",
    "--id-prefix",
    "q",
    help=(
        "Tasks whose id starts with this, whose name contains it, or (a bounded scan) "
        "whose args, kwargs or error contain it."
    ),
)
@click.option(
    "--since",
    "since_ms",
    callback=when_option,
    metavar="WHEN",
    help="Created at or after: 10m, 2h, 1d back from now, ms since the epoch, or ISO 8601.",
)
@click.option(
    "--until",
    "until_ms",
    callback=when_option,
    metavar="WHEN",
    help="Created at or before (as --since).",
)
@click.option(
    "--sort",
    metavar="FIELD",
    default=None,
    help=(
        "Over all matches: created, started, ended, runtime, attempts or name; -FIELD (or "
        "FIELD:desc) descending; newest and oldest are -created and created. Tasks "
        "without the field come last.  [default: newest]"
    ),
)
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@click.option("--after", help="Continue from a previous page's next cursor.")
@json_option
@click.option("--jsonl", "as_jsonl", is_flag=True, help="Print one JSON row a line.")
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV (formulas defused).")
@click.pass_obj
def list_tasks(
    settings: GroupOptions, /, as_json: bool, as_jsonl: bool, as_csv: bool, **filters: Any
) -> None:
    """List tasks (newest first, or --sort): name, id, state, progress (done), worker, start time
    (UTC), runtime and attempts (tries), then the number of matching tasks per state.
    Ids up to 36 characters (a UUID) are never cut, whatever the terminal's width;
    longer ones are cut (…) to what the other columns leave, and the other text columns
    are cut to fit. Stored text is shown escaped (``\\x1b``, ``\\u202e``).

    With --json, one shape whatever the filters: ``tasks`` (each row the task's fields
    without its history, plus its ``info``), ``totals``, ``totalsExact`` and
    ``nextAfter`` (null on the last page). --jsonl prints those rows one a line; --csv
    prints id, name, state, created, started, ended, runtime (ms), attempts, worker,
    queue and error, a cell starting with =, +, -, @, a tab or CR led by ' (so that a
    spreadsheet does not run it). Either is one page (--limit, --after).
    """
    formats = (("--json", as_json), ("--jsonl", as_jsonl), ("--csv", as_csv))
    chosen = [flag for flag, on in formats if on]
    if len(chosen) > 1:
        raise click.UsageError(
            f"--json, --jsonl and --csv are mutually exclusive (got {' and '.join(chosen)})"
        )
    # The options are named as TaskQuery's fields: the query is what they say.
    query = TaskQuery(**{**filters, "sort": filters["sort"] or "newest"})
    since, until = query.since_ms, query.until_ms
    if since is not None and until is not None and until < since:
        raise click.BadParameter("is before --since", param_hint="'--until'")
    with book_errors(), naming_options():
        page = settings.book.search(query.checked())
    if as_json:
        emit_json(page_body(page))
        return
    if as_jsonl or as_csv:
        text = jsonl_text(page.tasks) if as_jsonl else csv_text(page.tasks)
        # CSV is exact in a file or a pipe; on a terminal, escaped (as GNU ls's names),
        # its CRLF line ends shown as line ends.
        if as_csv and sys.stdout.isatty():
            text = shown(text.replace("\r\n", "\n"), lines=True)
        click.echo(text, nl=False)
        return
    console = rich_console()
    table, table_width, ids_cut = _search_table(page.tasks, now_ms(), console.width)
    console.width = max(console.width, table_width)  # only in a very narrow terminal
    console.print(table)
    if ids_cut:
        console.print("ids cut to fit (…): --json or --jsonl prints them whole")
    console.print(_totals_line(page.totals, page.totals_exact))
    lag = page.index_lag
    if lag.entries:  # the read could not catch the index up in full (docs/console.md)
        age = "" if lag.oldest_age_ms is None else f", the oldest {lag.oldest_age_ms // 1000} s ago"
        console.print(f"the index is {lag.entries} changes behind{age}")
    if page.next_after is not None:
        console.print(f"more: --after {page.next_after}")


_COLUMNS = ("name", "id", "state", "done", "worker", "started", "runtime", "tries")
"""The columns of ``ls``, in order."""
_KEPT_WHOLE = ("id", "state", "done", "tries")
"""Columns of ``ls`` not cut to fit: the id (to copy it, up to ``_ID_KEPT``) and the
short ones."""
_ID_KEPT = 36
"""Ids this long (a UUID, as Celery names tasks) are never cut; a longer one is cut to
what the other columns leave, at their natural widths."""
_CUT_BY_PRIORITY = ("name", "worker", "started", "runtime")
"""The others, most wanted first: the last is the first left out of a narrow terminal."""
_LEAST_CUT = 8
"""The fewest characters a cut column keeps (``mail.se…``)."""


def _fair_widths(natural: Mapping[str, int], room: int) -> dict[str, int]:
    """Widths for columns wanting ``natural`` widths in ``room`` characters: each gets
    what it needs up to an equal share of what is left (``_LEAST_CUT`` at least)."""
    widths: dict[str, int] = {}
    waiting = sorted(natural, key=lambda name: natural[name])
    while waiting:
        share = max(_LEAST_CUT, room // len(waiting))
        name = waiting.pop(0)
        widths[name] = min(natural[name], share)
        room -= widths[name]
    return widths


def _search_table(rows: Sequence[SearchRow], now_ms: int, width: int) -> tuple[Table, int, bool]:
    """The tasks as a table for a terminal ``width`` characters wide, its width, and
    whether an id was cut.

    State, progress and attempts are whole, and the id up to ``_ID_KEPT`` characters (an
    id is there to be copied); a longer id gets what the other columns leave at their
    natural widths (``_ID_KEPT`` at least). Name, worker, start time (UTC) and runtime
    are cut (…) to what is left, and when even ``_LEAST_CUT`` characters each do not
    fit, runtime, then start time, then worker are left out. Only a terminal narrower
    than the whole columns makes the table wider than ``width``.
    """
    cells: dict[str, list[str]] = {name: [] for name in _COLUMNS}
    for row in rows:
        task, info = row.task, row.info
        runtime = span(info.runtime_ms)
        if info.runtime_ms is None and task.state.value == "running" and info.started_at_ms:
            runtime = f"{span(max(0, now_ms - info.started_at_ms))}…"
        values = [
            info.name or "",
            task.id,
            task.state.value,
            f"{task.progress:g}%",
            info.worker or "",
            when(info.started_at_ms),
            runtime,
            f"{task.attempts}/{task.max_attempts}",
        ]
        for column, value in zip(cells.values(), values, strict=True):
            column.append(shown(value))
    natural = {name: max([len(name), *map(len, column)]) for name, column in cells.items()}
    padding = 2 * (len(_COLUMNS) - 1)  # one space each side between columns
    others = sum(size for name, size in natural.items() if name != "id")
    id_width = min(natural["id"], max(_ID_KEPT, width - others - padding))
    natural_id, natural["id"] = natural["id"], id_width
    whole = sum(natural[name] for name in _KEPT_WHOLE)
    cut = list(_CUT_BY_PRIORITY)

    def needed(cut_width: int) -> int:
        return whole + cut_width + 2 * (len(_KEPT_WHOLE) + len(cut) - 1)

    while cut and needed(_LEAST_CUT * len(cut)) > width:
        cut.pop()
    room = width - needed(0)
    wanted = {name: natural[name] for name in cut}
    fitted = wanted if sum(wanted.values()) <= room else _fair_widths(wanted, room)
    table = Table(box=None, padding=(0, 1), pad_edge=False, header_style="bold")
    columns = [name for name in _COLUMNS if name in _KEPT_WHOLE or name in fitted]
    for name in columns:
        table.add_column(
            name,
            width=fitted.get(name, natural[name]),
            no_wrap=True,
            overflow="ellipsis",
            justify="right" if name in ("done", "tries") else "left",
        )
    for index in range(len(rows)):
        table.add_row(*(cells[name][index] for name in columns))
    return table, needed(sum(fitted.values())), id_width < natural_id


COMMANDS = (status, list_tasks)
"""The commands this module adds to the ``asyncbook`` group."""
