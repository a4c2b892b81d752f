"""``asyncbook resend``: tasks, or a search's failed tasks, sent again from their kept
messages as new tasks (``asyncbook.celery.Resender``: the book decides, kombu publishes).
``asyncbook retry`` is its old name: the same command, with a note on stderr,
until 0.3.0."""

from __future__ import annotations

from typing import Any

import click

from .._console import TaskQuery
from ..redis import BROKER_SETTING, RESENDABLE_STATES, ResendResult
from ._audit_cmd import actor_option
from ._console_units import naming_options, when_option
from ._context import (
    EXIT_NOT_FOUND,
    GroupOptions,
    book_errors,
    broker_option,
    emit_json,
    fail,
    json_option,
)
from ._terminal import echo, shown

__all__ = ["COMMANDS", "OLD_NAME_NOTE"]

OLD_NAME_NOTE = "asyncbook: 'retry' is deprecated, use 'asyncbook resend' (retry goes in 0.3.0)"
"""What ``asyncbook retry`` says on stderr before it runs as ``resend``."""

_FILTERS = ("name", "state", "worker", "q", "since_ms", "until_ms", "after")


@click.command("resend")
@click.argument("task_ids", nargs=-1)
@click.option("--name", help="Resend the tasks of this Celery task name (a search).")
@click.option(
    "--state", type=click.Choice(RESENDABLE_STATES), default=None, help="[default: failed]"
)
@click.option("--worker", help="Only tasks that ran on this worker.")
@click.option("--q", "--id-prefix", "q", help="Only tasks whose id starts with this.")
@click.option("--since", "since_ms", callback=when_option, metavar="WHEN", help="As ls.")
@click.option("--until", "until_ms", callback=when_option, metavar="WHEN", help="As ls.")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True)
@click.option("--after", help="Continue from a previous search's next cursor.")
@click.option("--reason", default=None, help="Why (kept with each new task).")
@actor_option("the resend as (kept with each new task too)")
@click.option("--yes", "-y", is_flag=True, help="Resend a search's tasks without asking.")
@broker_option("each task's kept message is sent to it again, as a new task (required)")
@json_option
@click.pass_obj
def resend(
    settings: GroupOptions,
    /,
    task_ids: tuple[str, ...],
    limit: int,
    reason: str | None,
    actor: str,
    yes: bool,
    broker_url: str | None,
    as_json: bool,
    **filters: Any,
) -> None:
    """Run failed, expired or cancelled tasks again, each as a new task sent with its
    original name, arguments and routing (kept at publish: asyncbook_keep_messages).

    Give task ids, or a search (--name, --state failed by default, --worker, --q,
    --since, --until; at most --limit tasks, --after continues), which asks before it
    sends unless --yes; the search leaves out the tasks resent already (it names them).
    Each resend, and each refusal of a task that exists, is recorded
    in the audit trail (``asyncbook audit``, action resend) with ACTOR and the reason.
    Exits 0 when every task was sent again, 1 when any was refused (each refusal is
    printed: unknown, not ended so, resent already, no kept message). Not Celery's
    Task.retry: a resend is a new task, published by hand.
    """
    searching = any(filters[name] is not None for name in _FILTERS)
    if task_ids and searching:
        raise click.UsageError("give task ids or a search (--name, --state...), not both")
    if not task_ids and not searching:
        raise click.UsageError("give task ids, or a search: --name, --state, --since...")
    if not broker_url:
        raise click.UsageError(f"no broker to send tasks to: give --broker (or {BROKER_SETTING})")
    book = settings.book
    next_after = None
    ids = list(task_ids)
    left_out: list[tuple[str, str]] = []
    if searching:
        query = TaskQuery(**{**filters, "state": filters["state"] or "failed"}, limit=limit)
        with book_errors(), naming_options():
            page = book.search(query.checked())
        next_after = page.next_after
        # A task resent already would only be refused: the search offers the others.
        left_out = [(r.task.id, r.info.retried_as) for r in page.tasks if r.info.retried_as]
        ids = [row.task.id for row in page.tasks if not row.info.retried_as]
        if left_out:
            names = ", ".join(shown(task_id) for task_id, _ in left_out[:3])
            more = ", ..." if len(left_out) > 3 else ""
            echo(f"left out {len(left_out)} task(s) resent already: {names}{more}", err=True)
        if not ids:
            resent = f" ({len(left_out)} resent already)" if left_out else ""
            echo(f"no task matches{resent}", err=True)
            if as_json:
                _report([], next_after, as_json, left_out)
            return
        if not yes:
            listed = ", ".join(shown(task_id) for task_id in ids[:3])
            listed += ", ..." if len(ids) > 3 else ""
            click.confirm(f"Resend {len(ids)} task(s) ({listed})?", abort=True, err=True)
    from ..celery import Resender  # Celery's, loaded only to send

    with book_errors(), naming_options():
        results = Resender(book, broker_url).resend(ids, actor=actor, reason=reason)
    _report(results, next_after, as_json, left_out)


def _report(
    results: list[ResendResult],
    next_after: str | None,
    as_json: bool,
    left_out: list[tuple[str, str]],
) -> None:
    refused = [result for result in results if result.code is not None]
    if as_json:
        emit_json(
            {
                "results": [result.wire() for result in results],
                "retried": len(results) - len(refused),
                "refused": len(refused),
                "leftOut": [{"taskId": task, "retriedAs": new} for task, new in left_out],
                "nextAfter": next_after,
            }
        )
    else:
        for result in results:
            if result.code is None:
                echo(f"resent {result.task_id} as {result.retried_as}")
            else:
                echo(f"refused {result.task_id} ({result.code}): {result.message}", err=True)
        if next_after is not None:
            echo(f"more: --after {next_after}")
    if refused:
        fail(f"{len(refused)} of {len(results)} task(s) not resent", EXIT_NOT_FOUND)


@click.pass_context
def _old_name(context: click.Context, /, **params: Any) -> None:
    echo(OLD_NAME_NOTE, err=True)
    context.invoke(resend, **params)


retry = click.Command(
    "retry",
    callback=_old_name,
    params=list(resend.params),
    help="Deprecated: the old name of 'asyncbook resend', the same command (a "
    "note on stderr says so); goes in 0.3.0.",
    short_help="Deprecated: resend's old name (goes in 0.3.0).",
)

COMMANDS = (resend, retry)
"""The commands this module adds to the ``asyncbook`` group."""
