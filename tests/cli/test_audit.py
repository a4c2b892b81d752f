"""``asyncbook cancel`` records who (``cli:<login name>`` or ``--actor``); ``asyncbook
audit`` shows the trail; ``asyncbook serve``'s access options refuse what cannot hold."""

from __future__ import annotations

import getpass
import json
import re

import pytest

from asyncbook import RedisBook

from ..support.cli import run


def live(book: RedisBook, task_id: str) -> None:
    book.create(id=task_id, now_ms=book.now_ms(), ttl_ms=3_600_000, max_attempts=1)


def test_a_cancel_from_the_cli_is_audited_with_the_login_name(book: RedisBook) -> None:
    live(book, "c/1")
    assert run(book, "cancel", "c/1", "--reason", "stuck").exit_code == 0
    (entry,) = book.audit("c/1")
    assert (entry.actor, entry.action, entry.reason, entry.outcome) == (
        f"cli:{getpass.getuser()}",
        "cancel",
        "stuck",
        "cancelled",
    )
    assert run(book, "cancel", "c/1", "--actor", "ops-bot").exit_code == 0
    assert [e.actor for e in book.audit("c/1")] == ["ops-bot", f"cli:{getpass.getuser()}"]


def test_a_bad_actor_is_a_usage_error_and_changes_nothing(book: RedisBook) -> None:
    live(book, "c/2")
    result = run(book, "cancel", "c/2", "--actor", " ")
    assert result.exit_code == 2
    assert "--actor" in result.stderr
    task = book.get("c/2")
    assert task is not None
    assert task.state == "queued"
    assert book.audit() == []


def test_audit_shows_the_trail(book: RedisBook) -> None:
    live(book, "a/1")
    live(book, "a/2")
    book.cancel("a/1", "dup", actor="alice")
    book.cancel("a/2", actor="token:operator")
    shown = run(book, "audit", columns=200)
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    assert "token:operator" in lines[1]  # newest first, under the header
    assert "alice" in lines[2]
    assert "dup" in lines[2]
    one = json.loads(run(book, "audit", "a/1", "--json").stdout)
    assert [(e["actor"], e["taskId"], e["reason"]) for e in one["entries"]] == [
        ("alice", "a/1", "dup")
    ]
    assert (
        json.loads(run(book, "audit", "--since", "1h", "--limit", "1", "--json").stdout)["entries"][
            0
        ]["actor"]
        == "token:operator"
    )
    assert run(book, "audit", "--since", "2999-01-01").stdout == "no audit entries\n"
    assert run(book, "audit", "--since", "soon").exit_code == 2
    assert run(book, "audit", "--limit", "0").exit_code == 2


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--trusted-header", "X-Forwarded-User"], "--trusted-proxy"),
        (["--trusted-header", "X-Forwarded-User", "--trusted-proxy", "proxy"], "--trusted-proxy"),
        (["--token", "t" * 20, "--read-token", "t" * 20], "--read-token"),
        (["--read-token", "short"], "--read-token"),
        (
            ["--trusted-header", "X-User", "--trusted-proxy", "10.0.0.1", "--proxy-headers"],
            "--trusted-header",
        ),
    ],
)
def test_serve_refuses_access_options_that_cannot_hold(
    book: RedisBook, args: list[str], option: str
) -> None:
    result = run(book, "serve", *args)
    assert result.exit_code == 2, result.output
    assert re.search(f"Invalid value for '?{option}'?", result.stderr), result.stderr
