"""What a stored value can do to the terminal: nothing. Control characters, bidi
controls, rich markup and emoji codes in a task's id, name, args, queue, worker, error,
traceback or cancel reason print escaped or literally, through every command;
``--json`` stays exact JSON."""

from __future__ import annotations

import json

import pytest
from click.testing import Result

from asyncbook import RedisBook
from asyncbook._console import PublishInfo
from asyncbook.cli._terminal import json_text, shown

from ..support.cli import run as run_cli
from ..support.retries import kept_message

pytestmark = pytest.mark.redis

HOUR = 3_600_000
EVIL = (
    "\x1b]0;PWNED\x07\x1b[2J\x1b[H\x1b]8;;http://evil.example\x1b\\link\x1b]8;;\x1b\\"
    "\r\x08\x7f\x9b31m\u202eRTL\u2066\u200f[red]x[/red]:smile:"
)
"""Set the title, clear the screen, plant a link, overwrite the line, C1 CSI, bidi
overrides, rich markup and an emoji code."""
FORBIDDEN = {chr(c) for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))} - {"\n", "\t"}
FORBIDDEN |= {"\u202e", "\u2066", "\u200f"}
EVIL_ID = "ev-" + EVIL


def run(book: RedisBook, *args: str) -> Result:
    return run_cli(book, *args, columns=400)


def assert_safe(result: Result, *, literal: bool = True) -> None:
    """Nothing a terminal acts on; the markup and emoji code printed as they are."""
    for stream in (result.stdout, result.stderr):
        assert not FORBIDDEN & set(stream), repr(stream)
    if literal:  # escaped as \x1b, or in JSON (history's details) as \u001b
        assert "[red]x[/red]:smile:" in result.output, result.output
        assert "\\x1b]0;PWNED\\x07" in result.output or "\\u001b]0;PWNED" in result.output
        assert "\\u202eRTL\\u2066\\u200f" in result.output


@pytest.fixture
def evil(book: RedisBook) -> str:
    """A task whose every stored text is ``EVIL``: failed once, then cancelled."""
    now = book.now_ms()
    info = PublishInfo(name="n" + EVIL, args="a" + EVIL, kwargs="k" + EVIL, queue="q" + EVIL)
    book.create(id=EVIL_ID, now_ms=now, ttl_ms=HOUR, max_attempts=2, info=info, group_id="g" + EVIL)
    book.apply(EVIL_ID, {"type": "start", "atMs": now + 1, "worker": "w" + EVIL})
    failure = {"error": "e" + EVIL, "exception": "X" + EVIL, "traceback": "T\n" + EVIL}
    book.apply(EVIL_ID, {"type": "fail", "atMs": now + 2, "retryable": True, **failure})
    book.apply(EVIL_ID, {"type": "start", "atMs": now + 3, "worker": "w" + EVIL})
    book.cancel(EVIL_ID, "r" + EVIL, actor="cli:ana")
    return EVIL_ID


def test_shown_escapes_controls_and_bidi_and_keeps_the_rest() -> None:
    assert shown("a\x1bb\x00\x7f\x9b\u202e\u2069\u200e\u061c\u2028") == (
        "a\\x1bb\\x00\\x7f\\x9b\\u202e\\u2069\\u200e\\u061c\\u2028"
    )
    assert shown("a\nb\tc") == "a\\x0ab\\x09c"
    assert shown("a\nb", lines=True) == "a\nb"
    assert shown("ünï 日本 👨‍👩‍👧 [b]x\\y") == "ünï 日本 👨‍👩‍👧 [b]x\\y"  # ZWJ kept


@pytest.mark.parametrize(
    "args",
    [
        ["status", EVIL_ID],
        ["ls"],
        ["ls", "--state", "cancelled"],
        ["history", EVIL_ID],
        ["watch", EVIL_ID],
        ["cancel", EVIL_ID],
        ["audit"],
        ["audit", EVIL_ID],
    ],
)
def test_every_command_prints_stored_text_escaped(
    book: RedisBook, evil: str, args: list[str]
) -> None:
    result = run(book, *args)
    assert result.exit_code == 0, result.output
    assert_safe(result)


def test_status_shows_each_field_escaped(book: RedisBook, evil: str) -> None:
    out = run(book, "status", evil).stdout
    for prefix in ("ev-", "n", "a", "k", "q", "w", "g", "X", "r"):
        assert prefix + shown(EVIL) in out, prefix
    lines = out.splitlines()
    at = next(n for n, line in enumerate(lines) if line.split() == ["traceback", "T"])
    assert lines[at + 1].strip().startswith("\\x1b]0;PWNED")  # a traceback keeps its lines


def test_workers_and_the_group(book: RedisBook, evil: str) -> None:
    workers = run(book, "workers")
    assert workers.exit_code == 0, workers.output
    assert_safe(workers, literal=False)
    assert "w\\x1b]0;PWNED" in workers.stdout
    group = run(book, "group", "g" + EVIL)
    assert group.exit_code == 0, group.output
    assert_safe(group)


def test_notifications_retry_and_errors(book: RedisBook, evil: str) -> None:
    for args in (["notifications", "consume"], ["notifications", "drain", "--yes"]):
        result = run(book, *args)
        assert result.exit_code == 0, result.output
        assert_safe(result)
    refused = run(book, "retry", evil, "--broker", "redis://127.0.0.1:1/0")
    assert refused.exit_code == 1
    assert_safe(refused)
    missing = run(book, "status", "no" + EVIL)
    assert missing.exit_code == 1
    assert_safe(missing, literal=False)


def test_a_bulk_retry_prompt_is_escaped(book: RedisBook) -> None:
    now = book.now_ms()
    info = PublishInfo(name="app.x", message=kept_message().to_json())
    book.create(id=EVIL_ID, now_ms=now, ttl_ms=HOUR, max_attempts=1, info=info)
    book.apply(EVIL_ID, {"type": "start", "atMs": now + 1, "worker": "w"})
    book.apply(EVIL_ID, {"type": "fail", "atMs": now + 2, "error": "x", "retryable": False})
    declined = run(book, "resend", "--name", "app.x", "--broker", "redis://127.0.0.1:1/0")
    assert declined.exit_code == 1
    assert "Resend 1 task(s)" in declined.output
    assert_safe(declined)


@pytest.mark.parametrize(
    "args", [["status", EVIL_ID], ["ls"], ["history", EVIL_ID], ["audit"], ["watch", EVIL_ID]]
)
def test_json_stays_exact_and_inert(book: RedisBook, evil: str, args: list[str]) -> None:
    result = run(book, *args, "--json")
    assert result.exit_code == 0, result.output
    assert not FORBIDDEN & set(result.stdout)
    values = [json.loads(line) for line in result.stdout.splitlines()]
    assert EVIL_ID in strings(values) or "w" + EVIL in strings(values)  # exactly


def strings(value: object) -> set[str]:
    """Every string in a JSON value."""
    if isinstance(value, str):
        return {value}
    if isinstance(value, dict):
        return set(value) | {text for item in value.values() for text in strings(item)}
    if isinstance(value, list):
        return {text for item in value for text in strings(item)}
    return set()


def test_jsonl_is_inert(book: RedisBook, evil: str) -> None:
    rows = run(book, "ls", "--jsonl")
    assert not FORBIDDEN & set(rows.stdout)
    assert json.loads(rows.stdout.splitlines()[0])["id"] == EVIL_ID


def test_json_text_escapes_what_json_dumps_leaves() -> None:
    value = {"k\u202e": "\x9b\x7f\u2066\x1b ü"}
    raw = json.dumps(value, ensure_ascii=False)
    assert "\x9b" in raw
    assert "\u202e" in raw
    text = json_text(value)
    assert json.loads(text) == value
    assert not FORBIDDEN & set(text)
    assert "ü" in text
