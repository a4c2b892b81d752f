"""The CLI at its edges: ``ls`` with no rows or a very long id, ``watch`` of an unknown
task and without a terminal, ``notifications drain`` while workers deliver, a bulk
``resend`` past tasks resent already, ``history``'s times."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from asyncbook import RedisBook
from asyncbook._console import PublishInfo
from asyncbook.web import BackgroundServer, feed_for

from ..support.cli import CLI_REDIS_URL, run
from ..support.retries import ended_task, kept_message

pytestmark = pytest.mark.redis

HOUR = 3_600_000


def finish(book: RedisBook, task_id: str, name: str = "app.x", worker: str = "w@h") -> int:
    """Task ``task_id`` created, started on ``worker``, at 33% and 66%, succeeded; its
    creation time."""
    now = book.now_ms()
    info = PublishInfo(name=name)
    book.create(id=task_id, now_ms=now, ttl_ms=HOUR, max_attempts=1, info=info)
    book.apply(task_id, {"type": "start", "atMs": now + 1, "worker": worker})
    for step, progress in enumerate((33, 66), start=2):
        event = {"type": "progress", "atMs": now + step, "progress": progress, "cursor": "c"}
        book.apply(task_id, event)
    book.apply(task_id, {"type": "succeed", "atMs": now + 9, "resultRef": "r", "resultHash": "h"})
    return now


def test_ls_with_no_rows_prints_an_empty_table(book: RedisBook) -> None:
    result = run(book, "ls", "--state", "running")
    assert result.exit_code == 0, result.output
    assert "queued 0  running 0" in result.stdout
    assert "(total 0)" in result.stdout
    assert run(book, "ls").exit_code == 0


@pytest.mark.parametrize("columns", [120, 200])
def test_ls_cuts_a_very_long_id_and_keeps_the_columns(book: RedisBook, columns: int) -> None:
    long_id = "x" * 1_990 + "-tail"
    finish(book, long_id, name="proj.tasks.render", worker="celery@host-1")
    finish(book, "short", name="proj.tasks.render", worker="celery@host-1")
    result = run(book, "ls", columns=columns)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    header = lines[0].split()
    assert header == ["name", "id", "state", "done", "worker", "started", "runtime", "tries"]
    assert all(len(line) <= columns for line in lines), max(map(len, lines))
    assert "xxxx…" in result.stdout
    assert "-tail" not in result.stdout
    assert "short" in result.stdout
    assert "succeeded" in result.stdout
    assert "celery@host-1" in result.stdout
    assert "ids cut to fit" in result.stdout
    whole = json.loads(run(book, "ls", "--json").stdout)
    assert long_id in [row["id"] for row in whole["tasks"]]


def test_queues_without_a_broker_exits_1_naming_the_fix(book: RedisBook) -> None:
    result = run(book, "queues")
    assert result.exit_code == 1
    assert "Error: no broker configured: pass --broker URL" in result.stderr
    assert "asyncbook queue asyncbook; sweep never ran" in result.stdout


def test_watch_of_an_unknown_task_fails_before_printing(book: RedisBook) -> None:
    result = run(book, "watch", "nope")
    assert result.exit_code == 1
    assert result.stdout == ""
    assert "no task 'nope'" in result.stderr
    with BackgroundServer(book, feed_for(book)) as server:
        through = run(book, "watch", "nope", "--api", server.url)
    assert through.exit_code == 1
    assert through.stdout == ""
    assert "no task 'nope'" in through.stderr


def test_watch_without_a_terminal_prints_the_progress(book: RedisBook) -> None:
    finish(book, "w")
    result = run(book, "watch", "w")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "v2 progress 33%" in out
    assert "v3 progress 66%" in out
    assert "w succeeded v4 100%" in out
    assert out.endswith("w: succeeded at v4\n")
    assert "━" not in out  # no bar drawn on a pipe


def test_drain_asks_first_when_a_group_has_not_read_everything(book: RedisBook) -> None:
    finish(book, "n1")
    finish(book, "n2")
    book.consume_notifications("asyncbook", "worker-1", count=1)  # one read, one not
    declined = run(book, "notifications", "drain", input="n\n")
    assert declined.exit_code == 1
    assert "consumer group 'asyncbook' has 2 notification(s)" in declined.stderr
    assert "Drain them anyway?" in declined.stderr
    no_answer = run(book, "notifications", "drain", "--json")  # no terminal, no --yes
    assert no_answer.exit_code == 1
    assert no_answer.stdout == ""
    left = book.consume_notifications("other", "c", count=10)
    assert len(left) == 2  # nothing was taken
    drained = run(book, "notifications", "drain", "--yes", "--json")
    assert drained.exit_code == 0, drained.output
    assert [note["taskId"] for note in json.loads(drained.stdout)] == ["n1", "n2"]
    assert "consumer group 'asyncbook' has 2" in drained.stderr  # still said
    nothing = run(book, "notifications", "drain", "--json")
    assert (nothing.exit_code, json.loads(nothing.stdout)) == (0, [])


def test_drain_without_groups_does_not_ask(book: RedisBook) -> None:
    finish(book, "n1")
    result = run(book, "notifications", "drain")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("n1\tsucceeded\t")
    assert result.stderr == ""


def test_a_bulk_retry_leaves_out_tasks_retried_already(book: RedisBook) -> None:
    broker = ("--broker", CLI_REDIS_URL)
    queue = f"{book.namespace}-queue"
    for task_id in ("f1", "f2"):
        ended_task(book, task_id, message=kept_message(name="app.y", queue=queue), name="app.y")
    first = run(book, "resend", "f1", *broker)
    assert first.exit_code == 0, first.output
    asked = run(book, "resend", "--name", "app.y", *broker, input="n\n")
    assert "Resend 1 task(s) (f2)?" in asked.stderr
    assert "left out 1 task(s) resent already: f1" in asked.stderr
    again = run(book, "resend", "--name", "app.y", *broker, "--yes", "--json")
    assert again.exit_code == 0, again.output
    body = json.loads(again.stdout)
    assert [result["taskId"] for result in body["results"]] == ["f2"]
    info = book.info("f1")
    assert info is not None
    assert body["leftOut"] == [{"taskId": "f1", "retriedAs": info.retried_as}]
    done = run(book, "resend", "--name", "app.y", *broker, "--yes")
    assert done.exit_code == 0
    assert "no task matches (2 resent already)" in done.stderr


def test_history_prints_times_and_json_keeps_the_ms(book: RedisBook) -> None:
    created = finish(book, "h")
    table = run(book, "history", "h", columns=200)
    assert table.exit_code == 0, table.output
    started = created + 1  # version 1: the start
    moment = datetime.fromtimestamp(started / 1000, UTC).isoformat(timespec="milliseconds")
    assert moment.replace("+00:00", "Z") in table.stdout
    assert str(started) not in table.stdout
    entries = json.loads(run(book, "history", "h", "--json").stdout)
    assert entries[0]["event"]["atMs"] == started
