"""The ``asyncbook`` command: look tasks and groups up, watch, cancel, resend, sweep, serve
the page.

Exit codes: 0 ok, 1 not found (or refused: nothing to deliver, key used elsewhere, a task
that already ended, Redis unreachable), 2 usage error (bad option or argument).
"""

from __future__ import annotations

import os
import time

import click
from rich.table import Table

from .._models import STATE_NAMES, to_wire
from .._reasons import Reason
from .._sweep import sweep as run_sweep
from .._watch import task_summary
from ..artifacts import download_for
from ..redis import DEFAULT_REDIS_URL
from ._artifact_cmds import COMMANDS as ARTIFACT_COMMANDS
from ._artifact_cmds import artifacts_option, open_artifacts
from ._audit_cmd import COMMANDS as AUDIT_COMMANDS
from ._audit_cmd import actor_option
from ._console_cmds import COMMANDS as TASK_COMMANDS
from ._console_stats import COMMANDS as STATS_COMMANDS
from ._console_units import moment, naming_options, now_ms
from ._context import (
    EXIT_USAGE,
    GroupOptions,
    book_errors,
    emit_json,
    fail,
    json_option,
    rich_console,
    shards_option,
    task_or_exit,
)
from ._monitoring_cmds import monitoring
from ._queues import COMMANDS as QUEUE_COMMANDS
from ._resend_cmd import COMMANDS as RESEND_COMMANDS
from ._serve import serve
from ._terminal import cell, echo, echo_fields, json_text
from ._watch_cmd import COMMANDS as WATCH_COMMANDS

__all__ = ["cli", "main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--redis-url",
    envvar="ASYNCBOOK_REDIS_URL",
    default=DEFAULT_REDIS_URL,
    show_default=True,
    help="The book's Redis (env ASYNCBOOK_REDIS_URL).",
)
@click.option(
    "--namespace",
    envvar="ASYNCBOOK_NAMESPACE",
    default="asyncbook",
    show_default=True,
    help="The book's key namespace (env ASYNCBOOK_NAMESPACE).",
)
@shards_option
@click.version_option(package_name="asyncbook")
@click.pass_context
def cli(ctx: click.Context, redis_url: str, namespace: str, shards: int | None) -> None:
    """Look up, watch and serve the tasks asyncbook keeps in Redis."""
    ctx.obj = GroupOptions(redis_url=redis_url, namespace=namespace, shards=shards)


@cli.command()
@click.argument("task_id")
@json_option
@click.pass_obj
def history(settings: GroupOptions, task_id: str, as_json: bool) -> None:
    """Show a task's history: every version, the event that made it and when (ISO 8601,
    UTC, to the ms; --json keeps atMs, ms since the epoch)."""
    task = task_or_exit(settings, task_id)
    entries = [to_wire(entry) for entry in task.history]
    if as_json:
        emit_json(entries)
        return
    table = Table("version", "event", "at (UTC)", "details")
    for entry in entries:
        event = dict(entry["event"])
        kind, at = event.pop("type"), event.pop("atMs")
        table.add_row(str(entry["version"]), kind, moment(at), cell(json_text(event)))
    rich_console().print(table)


@cli.command("group")
@click.argument("group_id")
@click.option(
    "--limit",
    type=click.IntRange(1, 1000),
    default=100,
    show_default=True,
    help="Members to list (the first ones, in the order they were created).",
)
@json_option
@click.pass_obj
def show_group(settings: GroupOptions, group_id: str, limit: int, as_json: bool) -> None:
    """Show a group of tasks: counts by state, overall progress, and its members.

    The counts and progress cover every member (one lookup, whatever the group's size);
    the table lists the first --limit members. Exits 1 when the group is unknown.
    """
    with book_errors():
        summary = settings.book.group(group_id)
        tasks = settings.book.group_members(group_id, limit) if summary is not None else []
    if summary is None:
        fail(f"no group {group_id!r}")
    if as_json:
        emit_json({**to_wire(summary), "tasks": [task_summary(task) for task in tasks]})
        return
    console = rich_console()
    total = "not declared" if summary.total is None else str(summary.total)
    ended = "ended" if summary.ended else "not ended"
    # Ids are shown escaped, never read as rich markup ("[/x]" in an id is text).
    console.print(
        f"group {group_id}: {summary.members} member(s), total {total}, "
        f"progress {summary.progress}%, {ended}"
    )
    console.print("  ".join(f"{state} {summary.counts.get(state, 0)}" for state in STATE_NAMES))
    table = Table("id", "state", "progress", "version", "attempts")
    for task in tasks:
        attempts = f"{task.attempts}/{task.max_attempts}"
        table.add_row(
            cell(task.id), task.state.value, f"{task.progress}%", str(task.version), attempts
        )
    console.print(table)
    if summary.members > len(tasks):
        console.print(f"showing {len(tasks)} of {summary.members} members: raise --limit for more")


@cli.command()
@click.argument("task_id")
@click.option("--key", required=True, help="The idempotency key (reuse it when retrying).")
@artifacts_option
@click.option(
    "--url-expiry",
    type=click.IntRange(1, 7 * 24 * 3600),
    default=3600,
    show_default=True,
    help="Seconds the presigned URL of a result in an S3 store lasts.",
)
@json_option
@click.pass_obj
def deliver(
    settings: GroupOptions,
    task_id: str,
    key: str,
    artifacts_url: str | None,
    url_expiry: int,
    as_json: bool,
) -> None:
    """Hand a task's result over once per idempotency key (with --artifacts on S3, a
    presigned URL of it too)."""
    with book_errors():
        result = settings.book.deliver_result(task_id, key, time.time() * 1000)
    if result.reason is Reason.KEY_REUSED_FOR_OTHER_TASK:
        fail("this key was already used for another task")
    if not result.ok:
        fail(f"task {task_id!r} has no result to deliver ({result.reason})")
    assert result.receipt is not None
    store = open_artifacts(artifacts_url) if artifacts_url else None
    download = None if store is None else download_for(store, result.receipt.result_ref, url_expiry)
    if as_json:
        body = to_wire(result)
        emit_json(body if download is None else {**body, "download": download.wire()})
    else:
        echo(f"{result.reason}: {result.receipt.result_ref} ({result.receipt.result_hash})")
        if download is not None:
            echo(f"download: {download.url} (until {download.expires_at_ms} ms)")


@cli.command("cancel")
@click.argument("task_id")
@click.option("--reason", default=None, help="Why (kept as the task's error; default: cancelled).")
@actor_option("the cancel as")
@json_option
@click.pass_obj
def cancel_task(
    settings: GroupOptions, task_id: str, reason: str | None, actor: str, as_json: bool
) -> None:
    """Cancel a queued or running task: it ends as cancelled, recorded in the audit trail
    (``asyncbook audit``) with ACTOR and the reason.

    Written to the book at once; workers learn of it through the book's change channel
    (a queued task is never run, a running one stops at its next progress report).
    Exits 0 when cancelled (or cancelled before), 1 when the task is unknown or had already
    ended otherwise (its state is printed).
    """
    with book_errors(), naming_options():
        result = settings.book.cancel(task_id, reason, actor=actor)
    if as_json:
        emit_json(to_wire(result))  # the book's answer, whatever it is: the exit code says
    task = result.task
    if result.reason is Reason.EXPIRED:
        fail(f"task {task_id!r} was not cancelled: its deadline had passed, so it expired")
    if result.reason not in (Reason.CANCELLED, Reason.DUPLICATE_CANCEL):
        fail(f"task {task_id!r} was not cancelled: it had already ended ({task.state.value})")
    if not as_json:
        echo(f"{result.reason}: {task_id} ({task.error}) at v{task.version}")


@cli.command()
@click.option("--limit", type=click.IntRange(1, 100_000), default=1000, show_default=True)
@json_option
@click.pass_obj
def sweep(settings: GroupOptions, limit: int, as_json: bool) -> None:
    """Expire every task whose deadline has passed (one pass)."""
    with book_errors():
        report = run_sweep(settings.book, batch=limit)
    if as_json:
        emit_json({"expired": report.expired, "errors": report.errors})
    else:
        click.echo(f"expired {report.expired} task(s), {report.errors} error(s)")


@cli.group()
def notifications() -> None:
    """Read the outbox: one notification per terminal state."""


@notifications.command()
@click.option(
    "--yes", "-y", is_flag=True, help="Drain even what a consumer group has not read, unasked."
)
@json_option
@click.pass_obj
def drain(settings: GroupOptions, yes: bool, as_json: bool) -> None:
    """Take every pending notification (the outbox is emptied).

    The workers deliver notifications through a consumer group of the outbox (their
    sinks and webhooks), and so does ``consume``: draining takes the entries from under
    every group. When a group has entries it has not read or acknowledged yet, drain
    names it on stderr and asks first (default no); --yes drains without asking. With
    nobody to answer (no terminal) and no --yes, it takes nothing and exits 1.
    """
    with book_errors():
        groups = settings.book.gauges(now_ms()).groups
        # What a group would lose: the entries it has not acknowledged that still exist.
        behind = [
            (group, min(group.backlog, group.length))
            for group in groups
            if group.stream == "tasks" and min(group.backlog, group.length)
        ]
        for group, lost in behind:
            count = f"{'up to ' if group.lag is None else ''}{lost}"
            echo(
                f"consumer group {group.group!r} has {count} notification(s) it has not "
                "read or acknowledged yet: draining takes them from it",
                err=True,
            )
        if behind and not yes:
            click.confirm("Drain them anyway?", abort=True, err=True)
        notes = settings.book.drain_notifications()
    if as_json:
        emit_json([to_wire(note) for note in notes])
        return
    for note in notes:
        echo_fields(note.task_id, note.state.value, note.at_ms)


@notifications.command()
@click.option("--group", default="asyncbook-cli", show_default=True)
@click.option("--consumer", default=lambda: f"cli-{os.getpid()}", show_default="cli-<pid>")
@click.option("--count", type=click.IntRange(1, 1000), default=100, show_default=True)
@click.option("--block-ms", type=click.IntRange(0), default=None, help="Wait this long for news.")
@click.option("--no-ack", is_flag=True, help="Leave them pending (another consumer gets them).")
@json_option
@click.pass_obj
def consume(
    settings: GroupOptions,
    group: str,
    consumer: str,
    count: int,
    block_ms: int | None,
    no_ack: bool,
    as_json: bool,
) -> None:
    """Read notifications at least once through a consumer group, then acknowledge them."""
    book = settings.book
    with book_errors():
        entries = book.consume_notifications(group, consumer, count=count, block_ms=block_ms)
        if entries and not no_ack:
            book.ack(group, *(entry_id for entry_id, _ in entries))
    if as_json:
        emit_json([{"id": entry_id, **to_wire(note)} for entry_id, note in entries])
        return
    for entry_id, note in entries:
        echo_fields(entry_id, note.task_id, note.state.value, note.at_ms)


@cli.command()
@click.option(
    "--serve", is_flag=True, help="Keep the status page up on port 5566 afterwards, until Ctrl-C."
)
@click.option(
    "--app",
    "app_module",
    default="",
    metavar="MODULE",
    help="On a real Redis, the Celery app to run (celery -A MODULE, importable from the current "
    "directory; make demo gives a checkout's 'workers', configured by its celeryconfig.py).",
)
def demo(serve: bool, app_module: str) -> None:
    """Run the example Celery tasks end to end (``make demo`` is ``asyncbook demo --app
    workers``): on the Redis at REDIS_URL when it answers, else embedded (needs the demo
    extra)."""
    from . import _demo as demo_module

    demo_module.main(
        [*(["--serve"] if serve else []), *(["--app", app_module] if app_module else [])]
    )


@cli.command()
def walkthrough() -> None:
    """Print one task's whole life on the in-memory book (no Redis, no Celery)."""
    from .._walkthrough import main as walk_main

    walk_main()


@cli.command()
@click.option(
    "-A",
    "--app",
    "app_name",
    default=None,
    help="Your Celery app (as celery -A): its book, workers' queues and sinks are checked too.",
)
@click.option(
    "--timeout", type=click.FloatRange(0.1, 60), default=2.0, show_default=True,
    help="Seconds to wait for workers' answers and sinks' connections.",
)  # fmt: skip
@json_option
@click.pass_obj
def doctor(settings: GroupOptions, app_name: str | None, timeout: float, as_json: bool) -> None:
    """Check a deployment; exit 1 naming each problem with its fix.

    Redis (kind, version, scripting, maxmemory-policy, persistence, clock offset), the
    namespace, the sweep; with -A also install(), the queue and the sinks.
    """
    from . import _doctor
    from ._doctor_fleet import fleet_checks

    checks: list[_doctor.Check] = []
    book = settings.book
    if app_name is not None:
        try:
            app = _doctor.load_app(app_name)
        except Exception as error:
            fail(f"cannot load the Celery app {app_name!r}: {error}", EXIT_USAGE)
        checks += _doctor.app_checks(app, timeout)
        book = _doctor.app_book(app) or book  # the app's own URL and namespace
        checks += fleet_checks(book, app.conf.broker_url, app.conf.get("asyncbook_queue"))
    checks[:0] = _doctor.book_checks(book)
    if app_name is None:
        checks.append(
            _doctor.Check(
                "workers",
                "skipped",
                "install(), the queue's consumers and the sinks need the app",
                "pass -A <your app> (as celery -A)",
            )
        )
    problems = [check for check in checks if check.status == "problem"]
    if as_json:
        emit_json({"ok": not problems, "checks": [check.to_wire() for check in checks]})
    else:
        marks = {"ok": "ok", "warning": "WARN", "problem": "FAIL", "skipped": "skip"}
        for check in checks:
            echo(f"[{marks[check.status]:>4}] {check.name}: {check.detail}")
            if check.fix and check.status != "ok":
                echo(f"       fix: {check.fix}")
        echo(f"{len(problems)} problem(s)" if problems else "no problems")
    if problems:
        raise SystemExit(1)


_COMMANDS = (
    *TASK_COMMANDS,
    *STATS_COMMANDS,
    *QUEUE_COMMANDS,
    *RESEND_COMMANDS,
    *AUDIT_COMMANDS,
    *WATCH_COMMANDS,
    *ARTIFACT_COMMANDS,
)
for _command in (*_COMMANDS, monitoring, serve):
    cli.add_command(_command)


def main(args: list[str] | None = None) -> None:
    """Entry point of the ``asyncbook`` script."""
    cli.main(args=args, prog_name="asyncbook")


if __name__ == "__main__":
    main()
