"""``asyncbook result ID [-o FILE]`` (a task's result: fetched from the artifact store
and checked against its ``resultHash``, or read from Celery's meta in Redis) and
``asyncbook artifacts sweep [--delete]`` (the artifacts no record names)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from .._models import AsyncState
from ..artifacts import ArtifactStore, open_store, read, sweep_orphans
from ..errors import ArtifactError
from ._context import EXIT_USAGE, GroupOptions, book_errors, emit_json, fail, task_or_exit
from ._meta_results import META_PREFIX, meta_result
from ._terminal import echo

__all__ = ["COMMANDS", "artifacts_option", "open_artifacts"]

ARTIFACTS_SETTING = "ASYNCBOOK_ARTIFACTS"


def artifacts_option(command: Any) -> Any:
    """The ``--artifacts`` option (env ``ASYNCBOOK_ARTIFACTS``): the store's URL."""
    return click.option(
        "--artifacts",
        "artifacts_url",
        envvar=ARTIFACTS_SETTING,
        default=None,
        metavar="URL",
        help="The artifact store (file:///dir or s3://bucket/prefix; S3 reads boto3's "
        f"AWS_* environment), as the workers' asyncbook_artifacts (env {ARTIFACTS_SETTING}).",
    )(command)


def open_artifacts(url: str | None) -> ArtifactStore:
    """The store ``--artifacts`` names (a usage error when none does, or a bad one)."""
    if not url:
        fail(f"no artifact store: pass --artifacts or set {ARTIFACTS_SETTING}", EXIT_USAGE)
    try:
        return open_store(url)
    except ArtifactError as error:
        raise click.BadParameter(error.detail, param_hint="--artifacts") from None


@click.command("result")
@click.argument("task_id")
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write it here."
)
@artifacts_option
@click.pass_obj
def result(
    settings: GroupOptions, task_id: str, output: Path | None, artifacts_url: str | None
) -> None:
    """A succeeded task's result, checked against its resultHash (to stdout, or -o FILE)."""
    task = task_or_exit(settings, task_id)
    ref, digest = task.result_ref, task.result_hash
    if task.state is not AsyncState.SUCCEEDED or ref is None or digest is None:
        fail(f"task {task_id!r} has no result ({task.state.value})")
    try:
        if ref.startswith(META_PREFIX):
            data = meta_result(settings.book.client, ref, digest)
        elif ref.startswith(("file://", "s3://")):
            data = read(open_artifacts(artifacts_url), ref, digest)
        else:
            fail(f"task {task_id!r}'s result is {ref}: asyncbook cannot read it")
    except ArtifactError as error:
        fail(error.message)
    assert data is not None
    if output is None:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    else:
        output.write_bytes(data)
        echo(f"{len(data)} bytes ({digest}) written to {output}", err=True)


@click.group("artifacts")
def artifacts() -> None:
    """The artifact store's upkeep (results stored by reference)."""


@artifacts.command("sweep")
@click.option("--delete", is_flag=True, help="Delete the orphans (default: only list them).")
@click.option(
    "--older-than",
    type=click.FloatRange(0),
    default=3600.0,
    show_default=True,
    help="Seconds an orphan must be old (a result being written now is not one).",
)
@artifacts_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.pass_obj
def sweep(
    settings: GroupOptions,
    delete: bool,
    older_than: float,
    artifacts_url: str | None,
    as_json: bool,
) -> None:
    """The namespace's artifacts no record names (expired, pruned, a failed attempt's,
    a killed worker's): listed, or deleted with --delete."""
    store = open_artifacts(artifacts_url)
    with book_errors():
        try:
            report = sweep_orphans(
                store, settings.book, settings.namespace, older_than_s=older_than, delete=delete
            )
        except ArtifactError as error:
            fail(error.message)
    if as_json:
        orphans = [{"ref": o.ref, "size": o.size} for o in report.orphans]
        emit_json({"orphans": orphans, "kept": report.kept, "deleted": report.deleted})
        return
    for orphan in report.orphans:
        echo(f"{'deleted' if delete else 'orphan'} {orphan.ref} ({orphan.size} bytes)")
    echo(f"{len(report.orphans)} orphan(s), {report.kept} artifact(s) named by a record")


COMMANDS = (result, artifacts)
