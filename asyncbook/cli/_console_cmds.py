"""The operator console's commands: ``status`` with the task's info, ``ls`` with search
filters, ``workers`` and ``stats`` (``_commands`` adds them to the ``asyncbook`` group).

Times are printed in UTC. ``--since``/``--until`` take a duration back from now (``90s``,
``10m``, ``2h``, ``1d``), ms since the epoch, or an ISO 8601 time (UTC unless it names an
offset); ``--window``/``--within`` a duration.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from .._console import (
    STATS_MINUTE_MS,
    STATS_WINDOW_MS,
    MinuteStats,
    SearchRow,
    TaskInfo,
    TaskQuery,
    TaskStats,
    WorkerSummary,
    percentile_ms,
)
from .._models import STATE_NAMES, AsyncTask, to_wire
from .._times import parse_duration, parse_moment
from .._watch import task_summary
from ..errors import AsyncBookError
from ._context import (
    GroupOptions,
    book_errors,
    emit_json,
    json_option,
    rich_console,
    task_or_exit,
)

__all__ = ["COMMANDS", "duration_option", "when_option"]

_OPTION_OF_FIELD = {
    "name": "--name",
    "state": "--state",
    "worker": "--worker",
    "q": "--q",
    "since_ms": "--since",
    "until_ms": "--until",
    "sort": "--sort",
    "limit": "--limit",
    "after": "--after",
    "window_ms": "--window",
    "within_ms": "--within",
}


def _now_ms() -> int:
    return int(time.time() * 1000)


def duration_option(minimum_ms: int, maximum_ms: int) -> Callable[..., int | None]:
    """An option callback reading a duration (``90s``, ``10m``, ``2h``, ``1d``, ``500ms``)
    as ms, from ``minimum_ms`` to ``maximum_ms``; anything else is a usage error."""

    def convert(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
        if value is None:
            return None
        try:
            found = parse_duration(value, "duration")
        except AsyncBookError:
            raise click.BadParameter(
                f"{value!r} is not a duration such as 90s, 10m, 2h or 1d"
            ) from None
        if not minimum_ms <= found <= maximum_ms:
            low, high = _span(minimum_ms), _span(maximum_ms)
            raise click.BadParameter(f"{value!r} is not from {low} to {high}")
        return found

    return convert


def when_option(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """An option callback reading a time as ms since the epoch: a duration back from now
    (``10m``, ``2h``, ``1d``), ms since the epoch, or ISO 8601 (UTC without an offset)."""
    if value is None:
        return None
    try:
        return parse_moment(value, "time", _now_ms())
    except AsyncBookError:
        raise click.BadParameter(
            f"{value!r} is not a time: use a duration back from now (10m, 2h, 1d), "
            "ms since the epoch, or an ISO 8601 time after 1970"
        ) from None


@contextmanager
def _naming_options() -> Iterator[None]:
    """The book's refusal of a field, as a usage error naming the option (exit 2)."""
    try:
        yield
    except AsyncBookError as error:
        option = _OPTION_OF_FIELD.get(error.field or "")
        if option is None:
            raise
        message = error.message.removeprefix("async-task: ")
        raise click.BadParameter(message, param_hint=f"'{option}'") from None


def _when(ms: float | None) -> str:
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _span(ms: float | None) -> str:
    """A duration for people: 350 ms, 4.2 s, 3m 05s, 2h 10m, 1d 3h (zero parts left out)."""
    if ms is None:
        return ""
    if ms < 1_000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    minutes, seconds = divmod(int(ms // 1000), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d {hours}h" if hours else f"{days}d"
    if hours:
        return f"{hours}h {minutes:02d}m" if minutes else f"{hours}h"
    return f"{minutes}m {seconds:02d}s" if seconds else f"{minutes}m"


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
    console.print(_summary_table(task, _now_ms()))
    if info is not None:
        console.print()
        console.print(_info_table(info))


def _deadline(expires_at_ms: float, now_ms: int) -> str:
    """A deadline for people: ISO 8601 in UTC, and how far off it is."""
    moment = datetime.fromtimestamp(expires_at_ms / 1000, UTC).isoformat(timespec="seconds")
    moment = moment.replace("+00:00", "Z")
    if expires_at_ms >= now_ms:
        return f"{moment} (in {_span(expires_at_ms - now_ms)})"
    return f"{moment} ({_span(now_ms - expires_at_ms)} ago)"


def _summary_table(task: AsyncTask, now_ms: int) -> Table:
    """The task without its history; the deadline as a time (``--json`` keeps the ms)."""
    table = Table(show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    for key, value in task_summary(task).items():
        if key == "expiresAtMs":
            table.add_row("deadline", _deadline(value, now_ms))
        else:
            table.add_row(key, str(value))
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
        ("created", _when(info.created_at_ms) or None),
        ("started", _when(info.started_at_ms) or None),
        ("ended", _when(info.ended_at_ms) or None),
        ("runtime", _span(info.runtime_ms) or None),
        ("retries", None if info.retries is None else str(info.retries)),
        ("exception", info.exception),
        ("traceback", info.traceback),
    ]
    for key, value in rows:
        if value is not None:
            table.add_row(key, Text(value))  # arguments are text, never rich markup
    return table


@click.command("ls")
@click.option("--state", type=click.Choice(STATE_NAMES), help="Only tasks in this state.")
@click.option("--name", help="Only tasks of this Celery task name.")
@click.option("--worker", help="Only tasks that ran on this worker.")
@click.option("--q", "--id-prefix", "q", help="Only tasks whose id starts with this.")
@click.option(
    "--since",
    callback=when_option,
    metavar="WHEN",
    help="Created at or after: 10m, 2h, 1d back from now, ms since the epoch, or ISO 8601.",
)
@click.option(
    "--until", callback=when_option, metavar="WHEN", help="Created at or before (as --since)."
)
@click.option(
    "--sort", type=click.Choice(["newest", "oldest"]), default=None, help="[default: newest]"
)
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@click.option("--after", help="Continue from a previous page's next cursor.")
@json_option
@click.pass_obj
def list_tasks(
    settings: GroupOptions,
    state: str | None,
    name: str | None,
    worker: str | None,
    q: str | None,
    since: int | None,
    until: int | None,
    sort: str | None,
    limit: int,
    after: str | None,
    as_json: bool,
) -> None:
    """List tasks, newest first: name, id, state, progress (done), worker, start time
    (UTC), runtime and attempts (tries), then the number of matching tasks per state.
    Ids are never cut, whatever the terminal's width; the other text columns are.

    With --json and none of --name, --worker, --q, --since, --until, --sort, prints the
    tasks as before (``{"tasks": [...], "nextAfter": ...}``); with any of them, the search's
    page (``tasks`` of ``{task, info}``, ``totals``, ``totalsExact``, ``nextAfter``).
    """
    searching = any(value is not None for value in (name, worker, q, since, until, sort))
    if as_json and not searching:
        with book_errors():
            listed = settings.book.list_tasks(
                state=state, limit=limit, after=after, full_task=False
            )
        body: dict[str, Any] = {"tasks": [task_summary(t) for t in listed.tasks]}
        if listed.next_after is not None:
            body["nextAfter"] = listed.next_after
        emit_json(body)
        return
    if since is not None and until is not None and until < since:
        raise click.BadParameter("is before --since", param_hint="'--until'")
    query = TaskQuery(
        name=name,
        state=state,
        worker=worker,
        q=q,
        since_ms=since,
        until_ms=until,
        sort="oldest" if sort == "oldest" else "newest",
        limit=limit,
        after=after,
    )
    with book_errors(), _naming_options():
        page = settings.book.search(query.checked())
    if as_json:
        emit_json(to_wire(page))
        return
    console = rich_console()
    table, table_width = _search_table(page.tasks, _now_ms(), console.width)
    console.width = max(console.width, table_width)  # only an id wider than the terminal
    console.print(table)
    console.print(_totals_line(page.totals, page.totals_exact))
    if page.next_after is not None:
        console.print(f"more: --after {page.next_after}")


_COLUMNS = ("name", "id", "state", "done", "worker", "started", "runtime", "tries")
"""The columns of ``ls``, in order."""
_KEPT_WHOLE = ("id", "state", "done", "tries")
"""Columns of ``ls`` never cut: the id (to copy it) and the short ones."""
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


def _search_table(rows: Sequence[SearchRow], now_ms: int, width: int) -> tuple[Table, int]:
    """The tasks as a table for a terminal ``width`` characters wide, and its width.

    The id, state, progress and attempts are whole (an id is there to be copied); name,
    worker, start time (UTC) and runtime are cut (…) to what is left, and when even
    ``_LEAST_CUT`` characters each do not fit, runtime, then start time, then worker are
    left out. Only ids longer than the terminal make the table wider than ``width``.
    """
    cells: dict[str, list[str]] = {name: [] for name in _COLUMNS}
    for row in rows:
        task, info = row.task, row.info
        runtime = _span(info.runtime_ms)
        if info.runtime_ms is None and task.state.value == "running" and info.started_at_ms:
            runtime = f"{_span(max(0, now_ms - info.started_at_ms))}…"
        values = [
            info.name or "",
            task.id,
            task.state.value,
            f"{task.progress:g}%",
            info.worker or "",
            _when(info.started_at_ms),
            runtime,
            f"{task.attempts}/{task.max_attempts}",
        ]
        for column, value in zip(cells.values(), values, strict=True):
            column.append(value)
    natural = {name: max(len(name), *map(len, column)) for name, column in cells.items()}
    whole = sum(natural[name] for name in _KEPT_WHOLE)
    cut = list(_CUT_BY_PRIORITY)

    def needed(cut_width: int) -> int:  # one space of padding each side between columns
        return whole + cut_width + 2 * (len(_KEPT_WHOLE) + len(cut) - 1)

    while cut and needed(_LEAST_CUT * len(cut)) > width:
        cut.pop()
    room = width - needed(0)
    wanted = {name: natural[name] for name in cut}
    fitted = wanted if sum(wanted.values()) <= room else _fair_widths(wanted, room)
    table = Table(box=None, padding=(0, 1), pad_edge=False, header_style="bold")
    shown = [name for name in _COLUMNS if name in _KEPT_WHOLE or name in fitted]
    for name in shown:
        table.add_column(
            name,
            width=fitted.get(name, natural[name]),
            no_wrap=True,
            overflow="ellipsis",
            justify="right" if name in ("done", "tries") else "left",
        )
    for index in range(len(rows)):
        table.add_row(*(Text(cells[name][index]) for name in shown))
    return table, needed(sum(fitted.values()))


@click.command()
@click.option(
    "--within",
    callback=duration_option(1_000, STATS_WINDOW_MS),
    metavar="DURATION",
    default="1h",
    show_default=True,
    help="Workers seen within this long (up to 1d).",
)
@json_option
@click.pass_obj
def workers(settings: GroupOptions, within: int, as_json: bool) -> None:
    """List the workers seen recently, most recently seen first: their running tasks and
    how many tasks they started, finished and failed."""
    with book_errors(), _naming_options():
        found = settings.book.workers(within_ms=within)
    if as_json:
        emit_json([to_wire(worker) for worker in found])
        return
    console = rich_console()
    console.print(_workers_table(found, _now_ms()))
    if not found:
        console.print(f"no worker seen within {_span(within)}")


def _workers_table(found: Sequence[WorkerSummary], now_ms: int) -> Table:
    table = Table("worker", "last seen", "running")
    for column in ("started", "succeeded", "failed"):
        table.add_column(column, justify="right")
    for worker in found:
        ids = ", ".join(worker.running[:3])
        if len(worker.running) > 3:
            ids += f", +{len(worker.running) - 3} more"
        running = f"{len(worker.running)}" + (f": {ids}" if ids else "")
        table.add_row(
            Text(worker.name),
            f"{_span(max(0, now_ms - worker.last_seen_ms))} ago",
            Text(running),
            str(worker.started),
            str(worker.succeeded),
            str(worker.failed),
        )
    return table


@click.command()
@click.option("--name", help="One task name (default: every name).")
@click.option(
    "--window",
    callback=duration_option(STATS_MINUTE_MS, STATS_WINDOW_MS),
    metavar="DURATION",
    default="1h",
    show_default=True,
    help="How far back, from 1m to 1d.",
)
@click.option("--empty", is_flag=True, help="Show the rows where nothing happened too.")
@json_option
@click.pass_obj
def stats(
    settings: GroupOptions, name: str | None, window: int, empty: bool, as_json: bool
) -> None:
    """Per-minute stats (per 5 minutes over windows longer than an hour): tasks started,
    ended by state, runtime percentiles; then the window's totals and failure rate."""
    with book_errors(), _naming_options():
        TaskQuery(name=name).checked()
        found = settings.book.stats(name=name, window_ms=window)
    if as_json:
        emit_json(to_wire(found))
        return
    step = 1 if window <= 3_600_000 else 5
    rows = _stats_rows(found.minutes, step)
    shown = [row for row in rows if empty or _active(row)]
    console = rich_console()
    per = "minute" if step == 1 else f"{step} minutes"
    title = f"{found.name or 'every task name'}, last {_span(window)}, per {per} (UTC)"
    console.print(_stats_table(title, "minute" if step == 1 else "from", shown, found))
    if len(shown) < len(rows):
        console.print(f"{len(rows) - len(shown)} quiet row(s) left out (--empty shows them)")
    rate = "n/a" if found.failure_rate is None else f"{found.failure_rate:.1%}"
    console.print(
        f"failure rate {rate}; runtime p50 {_span(found.p50_ms) or 'n/a'}, "
        f"p95 {_span(found.p95_ms) or 'n/a'}, p99 {_span(found.p99_ms) or 'n/a'}"
    )


_COUNTS = ("started", "succeeded", "failed", "expired", "cancelled")


def _active(row: MinuteStats) -> bool:
    return any(getattr(row, count) for count in _COUNTS)


def _stats_rows(minutes: Sequence[MinuteStats], step: int) -> list[MinuteStats]:
    """The minutes merged ``step`` by ``step`` (oldest first), percentiles recomputed from
    the merged runtime buckets."""
    if step == 1:
        return list(minutes)
    merged: list[MinuteStats] = []
    size = step * STATS_MINUTE_MS
    for minute in minutes:
        start = minute.minute_ms - minute.minute_ms % size
        if not merged or merged[-1].minute_ms != start:
            merged.append(MinuteStats(minute_ms=start))
        last = merged[-1]
        buckets = _add(last.runtime_buckets, minute.runtime_buckets)
        merged[-1] = last.model_copy(
            update={
                **{count: getattr(last, count) + getattr(minute, count) for count in _COUNTS},
                "runtime_buckets": buckets,
                "p50_ms": percentile_ms(buckets, 0.50),
                "p95_ms": percentile_ms(buckets, 0.95),
                "p99_ms": percentile_ms(buckets, 0.99),
            }
        )
    return merged


def _add(left: Sequence[int], right: Sequence[int]) -> tuple[int, ...]:
    size = max(len(left), len(right))
    return tuple(
        (left[i] if i < len(left) else 0) + (right[i] if i < len(right) else 0) for i in range(size)
    )


def _stats_table(title: str, first: str, rows: Sequence[MinuteStats], found: TaskStats) -> Table:
    table = Table(title=Text(title), title_justify="left", show_footer=True)
    table.add_column(first, footer="window")
    for count in _COUNTS:
        table.add_column(count, justify="right", footer=str(found.totals.get(count, 0)))
    for label, value in (("p50", found.p50_ms), ("p95", found.p95_ms), ("p99", found.p99_ms)):
        table.add_column(label, justify="right", footer=_span(value))
    for row in rows:
        table.add_row(
            _when(row.minute_ms)[5:16],
            *(str(getattr(row, count)) for count in _COUNTS),
            _span(row.p50_ms),
            _span(row.p95_ms),
            _span(row.p99_ms),
        )
    return table


COMMANDS = (status, list_tasks, workers, stats)
"""The commands this module adds to the ``asyncbook`` group."""
