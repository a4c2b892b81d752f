"""``asyncbook queues``: the broker's queues (ready, per priority, unacked, the oldest
message's age) and asyncbook's own with the sweep's health; and the ``--broker`` and
``--asyncbook-queue`` options ``serve`` shares."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from .._health import sweep_health
from .._queues import (
    DEFAULT_OWN_QUEUE,
    MAX_NAMED_QUEUES,
    MAX_QUEUES,
    BrokerReader,
    QueuesReport,
    UnsupportedBroker,
    broker_kind,
    checked_queue_name,
    oldest_task_ids,
    queues_report,
    read_broker,
)
from ..errors import AsyncBookError
from ._console_units import span
from ._context import (
    GroupOptions,
    book_errors,
    broker_option,
    emit_json,
    fail,
    json_option,
    rich_console,
)
from ._terminal import cell

__all__ = ["COMMANDS", "broker_for", "broker_options"]


def broker_for(url: str | None) -> BrokerReader | None:
    """The reader of the broker at ``url`` (None: no broker configured); a URL redis-py
    cannot read is a usage error naming ``--broker``."""
    if not url:
        return None
    kind = broker_kind(url)
    try:
        # The readers know Celery's layouts: asyncbook.celery's, loaded only for a broker.
        if kind == "redis":
            from ..celery import RedisBroker

            return RedisBroker(url)
        if kind == "amqp":
            from ..celery import AmqpBroker

            return AmqpBroker(url)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--broker") from None
    return UnsupportedBroker(url)


def _queue_name(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """``--queue``/``--asyncbook-queue`` values checked as queue names."""
    names = [value] if isinstance(value, str) else list(value)
    try:
        for name in names:
            checked_queue_name(name)
    except AsyncBookError as error:
        message = error.message.replace("async-task: queue", "a queue name")
        raise click.BadParameter(message) from None
    return value


def broker_options(use: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--broker`` (env ASYNCBOOK_BROKER_URL; ``use`` says what the command does with it)
    and ``--asyncbook-queue`` (env ASYNCBOOK_QUEUE) of a command."""
    return lambda command: broker_option(use)(_own_queue_option(command))


def _own_queue_option(command: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--asyncbook-queue",
        "own_queue",
        envvar="ASYNCBOOK_QUEUE",
        metavar="NAME",
        default=DEFAULT_OWN_QUEUE,
        show_default=True,
        callback=_queue_name,
        help="The queue asyncbook.sweep and asyncbook.deliver go to (the Celery setting "
        "asyncbook_queue; env ASYNCBOOK_QUEUE).",
    )(command)


@click.command()
@broker_options("its queues are read")
@click.option(
    "--queue",
    "named",
    multiple=True,
    callback=_queue_name,
    metavar="NAME",
    help=f"A queue to show besides those found (repeatable, {MAX_NAMED_QUEUES} at most).",
)
@click.option(
    "--limit",
    type=click.IntRange(1, MAX_QUEUES),
    default=MAX_QUEUES,
    show_default=True,
    help="Most queues listed.",
)
@json_option
@click.pass_obj
def queues(
    settings: GroupOptions,
    broker_url: str | None,
    own_queue: str,
    named: Sequence[str],
    limit: int,
    as_json: bool,
) -> None:
    """Show the broker's queues: messages waiting (per priority on Redis), unacked, the
    oldest waiting task's age; and asyncbook's own queue with the sweep's health.

    On Redis every queue found (a bounded SCAN of kombu's bindings) is read in one
    pipelined round trip; on AMQP one queue at a time (the queues named, celery and
    asyncbook's own). Exits 1 naming the problem when no broker is configured or it
    cannot be read (asyncbook's own side is printed first all the same).
    """
    if len(named) > MAX_NAMED_QUEUES:
        raise click.BadParameter(f"at most {MAX_NAMED_QUEUES} times", param_hint="--queue")
    broker = broker_for(broker_url)
    try:
        snapshot, state = read_broker(broker, list(dict.fromkeys(named)), own_queue, limit)
    finally:
        if broker is not None:
            broker.close()
    with book_errors():
        book = settings.book
        health = sweep_health(book)
        created: dict[str, float | None] = {}
        for task_id in oldest_task_ids(snapshot):
            info = book.info(task_id)
            created[task_id] = None if info is None else info.created_at_ms
    report = queues_report(snapshot, state, health, created, own_queue)
    if as_json:
        emit_json(report.to_wire())
    else:
        _print(report)
    if state.problem:  # no broker configured, or it could not be read
        fail(state.problem)


def _age(report: QueuesReport, index: int) -> Text:
    row = report.queues[index]
    if row.oldest_age_ms is not None:
        return cell(span(row.oldest_age_ms))
    return cell("" if row.ready == 0 else f"- ({row.oldest_note})")


def _print(report: QueuesReport) -> None:
    console = rich_console()
    broker = report.broker
    if broker.configured:
        console.print(f"broker {broker.url} ({broker.kind})")
    if report.queues:
        table = Table("queue", "ready", "priorities", "unacked", "consumers", "oldest")
        for index, row in enumerate(report.queues):
            priorities = " ".join(f"{step}:{count}" for step, count in row.priorities.items())
            table.add_row(
                cell(row.name + (" (asyncbook)" if row.asyncbook else "")),
                str(row.ready),
                priorities,
                "" if row.unacked is None else str(row.unacked),
                "" if row.consumers is None else str(row.consumers),
                _age(report, index),
            )
        console.print(table)
    unacked = report.unacked
    if unacked.total is not None:
        sample = "" if unacked.exact else " (per queue: counted over a sample)"
        console.print(f"unacked: {unacked.total}{sample}")
    if report.truncated:
        console.print(f"more queues than {len(report.queues)}: raise --limit or name them")
    elif broker.configured and not broker.problem and not report.discovery_complete:
        where = "AMQP lists no queues" if broker.kind == "amqp" else "the scan stopped at its cap"
        console.print(f"{where}: name other queues with --queue")
    own = report.asyncbook
    health = own.health
    age = health["lastSweepAgeMs"]
    if age is None:
        sweep = "never ran"
    else:
        sweep = f"{'stopped' if health['sweepStopped'] else 'running'} (last {span(age)} ago)"
    waiting = "" if own.ready is None else f", {own.ready} waiting"
    console.print(
        f"asyncbook queue {own.queue}{waiting}; sweep {sweep}, {health['overdueTasks']} overdue",
    )


COMMANDS = (queues,)
