"""The console's commands about workers and time: ``workers`` (seen recently, running
tasks, counts) and ``stats`` (per-minute throughput, runtime percentiles, failure rate);
``_commands`` adds them to the ``asyncbook`` group."""

from __future__ import annotations

from collections.abc import Sequence

import click
from rich.table import Table

from .._console import (
    STATS_MINUTE_MS,
    STATS_WINDOW_MS,
    MinuteStats,
    TaskQuery,
    TaskStats,
    WorkerSummary,
    percentile_ms,
)
from .._models import to_wire
from ._console_units import duration_option, naming_options, now_ms, span, when
from ._context import GroupOptions, book_errors, emit_json, json_option, rich_console
from ._terminal import cell

__all__ = ["COMMANDS"]


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
    """List the workers seen recently, online ones first, then the most recently seen:
    their state, pool, queues, running tasks and how many tasks they started, finished
    and failed."""
    with book_errors(), naming_options():
        found = settings.book.workers(within_ms=within)
    if as_json:
        emit_json([to_wire(worker) for worker in found])
        return
    console = rich_console()
    console.print(_workers_table(found, now_ms()))
    if not found:
        console.print(f"no worker seen within {span(within)}")


def _workers_table(found: Sequence[WorkerSummary], now_ms: int) -> Table:
    table = Table("worker", "state", "pool", "queues", "last seen", "running")
    for column in ("started", "succeeded", "failed"):
        table.add_column(column, justify="right")
    for worker in found:
        ids = ", ".join(worker.running[:3])
        if len(worker.running) > 3:
            ids += f", +{len(worker.running) - 3} more"
        running = f"{len(worker.running)}" + (f": {ids}" if ids else "")
        record = worker.record
        pool = f"{record.pool} x{record.concurrency}" if record and record.pool else "-"
        table.add_row(
            cell(worker.name),
            "-" if worker.online is None else "online" if worker.online else "offline",
            cell(pool),
            cell(", ".join(record.queues) if record else "-"),
            f"{span(max(0, now_ms - worker.last_seen_ms))} ago",
            cell(running),
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
    with book_errors(), naming_options():
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
    title = f"{found.name or 'every task name'}, last {span(window)}, per {per} (UTC)"
    console.print(_stats_table(title, "minute" if step == 1 else "from", shown, found))
    if len(shown) < len(rows):
        console.print(f"{len(rows) - len(shown)} quiet row(s) left out (--empty shows them)")
    rate = "n/a" if found.failure_rate is None else f"{found.failure_rate:.1%}"
    console.print(
        f"failure rate {rate}; runtime p50 {span(found.p50_ms) or 'n/a'}, "
        f"p95 {span(found.p95_ms) or 'n/a'}, p99 {span(found.p99_ms) or 'n/a'}"
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
    table = Table(title=cell(title), title_justify="left", show_footer=True)
    table.add_column(first, footer="window")
    for count in _COUNTS:
        table.add_column(count, justify="right", footer=str(found.totals.get(count, 0)))
    for label, value in (("p50", found.p50_ms), ("p95", found.p95_ms), ("p99", found.p99_ms)):
        table.add_column(label, justify="right", footer=span(value))
    for row in rows:
        table.add_row(
            when(row.minute_ms)[5:16],
            *(str(getattr(row, count)) for count in _COUNTS),
            span(row.p50_ms),
            span(row.p95_ms),
            span(row.p99_ms),
        )
    return table


COMMANDS = (workers, stats)
"""The commands this module adds to the ``asyncbook`` group."""
