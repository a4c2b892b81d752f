"""``asyncbook resend``: task ids or a search sent again through a broker (the CLI tests'
Redis; the queue's list is read back), the refusals and their exit codes."""

from __future__ import annotations

import getpass
import json
from collections.abc import Iterator

import pytest
import redis

from asyncbook import RedisBook
from asyncbook.cli._resend_cmd import OLD_NAME_NOTE

from ..support.cli import CLI_REDIS_URL, run
from ..support.retries import ended_task, kept_message

pytestmark = pytest.mark.redis

BROKER = ("--broker", CLI_REDIS_URL)


@pytest.fixture
def queue(namespace: str) -> Iterator[str]:
    name = f"{namespace}-queue"
    yield name
    client = redis.Redis.from_url(CLI_REDIS_URL)
    for key in client.scan_iter(match=f"{name}*"):
        client.delete(key)
    client.close()


def sent(queue: str) -> int:
    client = redis.Redis.from_url(CLI_REDIS_URL)
    try:
        return sum(client.llen(key) for key in client.scan_iter(match=f"{queue}*"))
    finally:
        client.close()


def test_retry_sends_a_task_again_with_who_and_why(book: RedisBook, queue: str) -> None:
    ended_task(book, "t", message=kept_message(queue=queue))
    result = run(book, "resend", "t", *BROKER, "--reason", "fixed", "--actor", "ana")
    assert result.exit_code == 0, result.output
    new_id = result.output.split(" as ")[1].strip()
    assert result.output == f"resent t as {new_id}\n"
    assert sent(queue) == 1
    info = book.info(new_id)
    assert info is not None
    assert (info.retry_of, info.retried_by, info.retry_reason) == ("t", "ana", "fixed")
    again = run(book, "resend", "t", *BROKER, "--json")
    assert again.exit_code == 1
    body = json.loads(again.stdout.splitlines()[0])
    assert body["results"] == [
        {
            "taskId": "t",
            "retriedAs": new_id,
            "code": "already-retried",
            "message": f"task 't' was resent already, as {new_id!r}",
        }
    ]
    assert (body["retried"], body["refused"]) == (0, 1)
    assert sent(queue) == 1


def test_a_search_asks_first_unless_yes(book: RedisBook, queue: str) -> None:
    for n in range(3):
        ended_task(book, f"f{n}", message=kept_message(name="app.x", queue=queue), name="app.x")
    declined = run(book, "resend", "--name", "app.x", "--since", "1h", *BROKER, input="n\n")
    assert declined.exit_code == 1
    assert "Resend 3 task(s)" in declined.output
    assert sent(queue) == 0
    accepted = run(book, "resend", "--name", "app.x", *BROKER, input="y\n")
    assert accepted.exit_code == 0, accepted.output
    assert accepted.output.count("resent f") == 3
    assert sent(queue) == 3
    none_left = run(book, "resend", "--name", "app.x", "--state", "cancelled", *BROKER, "--yes")
    assert (none_left.exit_code, none_left.output) == (0, "no task matches\n")


def test_refusals_exit_1_and_say_why(book: RedisBook) -> None:
    ended_task(book, "plain")
    result = run(book, "resend", "plain", "nobody", *BROKER)
    assert result.exit_code == 1
    assert "refused plain (no-message)" in result.output
    assert "asyncbook_keep_messages" in result.output
    assert "refused nobody (not-found)" in result.output
    assert "2 of 2 task(s) not resent" in result.output


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (("t",), "--broker"),
        (("t", "--name", "x", *BROKER), "not both"),
        (BROKER, "give task ids"),
        (("--state", "queued", *BROKER), "--state"),
        (("--since", "yesterday", *BROKER), "--since"),
        (("t", "--reason", "x" * 1001, *BROKER), "reason"),
    ],
)
def test_bad_usage_exits_2_and_sends_nothing(
    book: RedisBook, args: tuple[str, ...], named: str
) -> None:
    ended_task(book, "t", message=kept_message())
    result = run(book, "resend", *args)
    assert result.exit_code == 2, result.output
    assert named in result.output
    info = book.info("t")
    assert info is not None
    assert info.retried_as is None


def test_status_never_shows_the_kept_message(book: RedisBook) -> None:
    message = kept_message()
    ended_task(book, "t", message=message)
    for args in (("status", "t", "--json"), ("status", "t"), ("ls", "--json")):
        output = run(book, *args).output
        assert "contentType" not in output
        assert "routingKey" not in output


def test_serve_takes_the_broker_retries_go_to(book: RedisBook) -> None:
    result = run(book, "serve", "--help")
    assert "--broker URL" in result.output
    assert "ASYNCBOOK_BROKER_URL" in result.output


def test_a_retry_is_audited_as_the_login_name_or_the_actor(book: RedisBook, queue: str) -> None:
    ended_task(book, "t", message=kept_message(queue=queue))
    result = run(book, "resend", "t", *BROKER, "--reason", "fixed")
    assert result.exit_code == 0, result.output
    new_id = result.output.split(" as ")[1].strip()
    [entry] = book.audit("t")
    assert (entry.actor, entry.action, entry.reason, entry.outcome, entry.retried_as) == (
        f"cli:{getpass.getuser()}",
        "resend",
        "fixed",
        "retried",
        new_id,
    )
    info = book.info(new_id)
    assert info is not None
    assert info.retried_by == f"cli:{getpass.getuser()}"  # as the cancel's default
    assert run(book, "resend", "t", *BROKER, "--actor", "ops-bot").exit_code == 1
    assert [(e.actor, e.outcome) for e in book.audit("t")] == [
        ("ops-bot", "already-retried"),
        (f"cli:{getpass.getuser()}", "retried"),
    ]
    shown = run(book, "audit", "t", columns=200)
    assert f"retried as {new_id}" in shown.stdout


def test_a_bad_actor_is_a_usage_error_and_sends_nothing(book: RedisBook, queue: str) -> None:
    ended_task(book, "t", message=kept_message(queue=queue))
    result = run(book, "resend", "t", *BROKER, "--actor", " ")
    assert result.exit_code == 2
    assert "--actor" in result.stderr
    assert sent(queue) == 0
    assert book.audit() == []


@pytest.mark.parametrize(
    ("command", "says"),
    [
        ("resend", "kept message is sent to it again, as a new task (required)"),
        ("retry", "kept message is sent to it again, as a new task (required)"),
        ("queues", "its queues are read"),
        ("serve", "its queues are shown (/queues, /api/queues) and resends are sent to it"),
    ],
)
def test_the_broker_option_says_what_each_command_does_with_it(
    book: RedisBook, command: str, says: str
) -> None:
    result = run(book, command, "--help")
    assert result.exit_code == 0, result.output
    option = result.output.split("--broker URL", 1)[1].split("\n  -", 1)[0]
    help_text = " ".join(option.split())
    assert says in help_text
    if command in ("resend", "retry"):
        assert "queues are read" not in help_text  # resend reads no queue


def test_retry_without_a_broker_is_a_usage_error_that_names_it(book: RedisBook) -> None:
    ended_task(book, "t", message=kept_message(queue="q"))
    result = run(book, "resend", "--name", "shop.charge", "--yes")
    assert result.exit_code == 2
    assert "give --broker (or ASYNCBOOK_BROKER_URL)" in result.stderr
    assert book.audit() == []


def test_retry_is_resend_under_its_old_name_with_a_note_on_stderr(
    book: RedisBook, queue: str
) -> None:
    for task_id in ("a", "b"):
        ended_task(book, task_id, message=kept_message(queue=queue))
    new = run(book, "resend", "a", *BROKER, "--reason", "fixed", "--actor", "ana")
    old = run(book, "retry", "b", *BROKER, "--reason", "fixed", "--actor", "ana")
    assert (new.exit_code, old.exit_code) == (0, 0)
    assert (new.stderr, old.stderr) == ("", OLD_NAME_NOTE + "\n")
    assert len(OLD_NAME_NOTE.splitlines()) == 1
    new_id, old_id = (result.stdout.split(" as ")[1].strip() for result in (new, old))
    assert (new.stdout, old.stdout) == (f"resent a as {new_id}\n", f"resent b as {old_id}\n")
    assert sent(queue) == 2
    assert [entry.action for entry in book.audit("a") + book.audit("b")] == ["resend"] * 2
    refused = [
        run(book, name, task, *BROKER, "--json") for name, task in (("resend", "a"), ("retry", "b"))
    ]
    assert [result.exit_code for result in refused] == [1, 1]
    bodies = [json.loads(result.stdout.splitlines()[0]) for result in refused]
    for body, task, made in zip(bodies, "ab", (new_id, old_id), strict=True):
        assert body["results"] == [
            {
                "taskId": task,
                "retriedAs": made,
                "code": "already-retried",
                "message": f"task {task!r} was resent already, as {made!r}",
            }
        ]
    assert sent(queue) == 2


def test_the_command_list_names_retry_as_deprecated(book: RedisBook) -> None:
    listed = run(book, "--help", columns=200).stdout
    assert "resend" in listed
    [line] = [line for line in listed.splitlines() if line.strip().startswith("retry ")]
    assert "Deprecated: resend's old name (goes in 0.3.0)." in line
    assert run(book, "retry", "--help").stdout.replace("retry", "resend").count("--broker") == 1
