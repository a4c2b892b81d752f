"""``asyncbook ls --jsonl`` and ``--csv`` (formulas defused) through click's runner, on
RedisBook with real Redis; the three output flags exclude each other."""

from __future__ import annotations

import csv
import io
import json

import pytest
from click.testing import Result

from asyncbook import RedisBook
from asyncbook._console import PublishInfo
from asyncbook._task_csv import CSV_COLUMNS, number_cell, safe_cell

from ..support.cli import run as run_cli

pytestmark = pytest.mark.redis

HOUR = 3_600_000


def run(book: RedisBook, *args: str) -> Result:
    result = run_cli(book, *args, columns=160)
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture
def crafted(book: RedisBook) -> int:
    """Three tasks; one whose name, queue, worker and error a spreadsheet would run."""
    now = book.now_ms()
    book.create(
        id="plain", now_ms=now - 3_000, ttl_ms=HOUR, max_attempts=2,
        info=PublishInfo(name="mail.send", queue="mail"),
    )  # fmt: skip
    book.create(
        id="evil", now_ms=now - 2_000, ttl_ms=HOUR, max_attempts=2,
        info=PublishInfo(name='=HYPERLINK("http://x.invalid","y")', queue="-q"),
    )  # fmt: skip
    book.apply("evil", {"type": "start", "atMs": now - 1_500, "worker": "@w1"})
    event = {"type": "fail", "atMs": now - 1_000, "error": "+boom", "retryable": False}
    book.apply("evil", event)
    book.create(id="third", now_ms=now - 1_000, ttl_ms=HOUR, max_attempts=1)
    return now


def test_jsonl_is_the_json_rows_one_a_line_bounded_by_limit(book: RedisBook, crafted: int) -> None:
    page = json.loads(run(book, "ls", "--json").stdout)
    lines = run(book, "ls", "--jsonl").stdout.splitlines()
    assert [json.loads(line) for line in lines] == page["tasks"]
    assert [json.loads(line)["id"] for line in lines] == ["third", "evil", "plain"]
    two = run(book, "ls", "--jsonl", "--limit", "2").stdout.splitlines()
    assert len(two) == 2
    named = run(book, "ls", "--jsonl", "--name", "mail.send").stdout.splitlines()
    assert [(json.loads(line)["id"], json.loads(line)["info"]["queue"]) for line in named] == [
        ("plain", "mail")
    ]


def test_csv_has_the_columns_and_defuses_formulas(book: RedisBook, crafted: int) -> None:
    text = run(book, "ls", "--csv").stdout
    rows = list(csv.reader(io.StringIO(text)))
    assert tuple(rows[0]) == CSV_COLUMNS
    by_id = {row[0]: dict(zip(CSV_COLUMNS, row, strict=True)) for row in rows[1:]}
    assert list(by_id) == ["third", "evil", "plain"]
    evil = by_id["evil"]
    assert evil["name"] == '\'=HYPERLINK("http://x.invalid","y")'
    assert (evil["queue"], evil["worker"], evil["error"]) == ("'-q", "'@w1", "'+boom")
    assert (evil["state"], evil["attempts"], evil["runtime"]) == ("failed", "1", "500")
    assert evil["started"].endswith("Z")
    assert by_id["plain"]["name"] == "mail.send"
    assert by_id["third"]["name"] == ""
    assert len(rows) == 4
    one = run(book, "ls", "--csv", "--limit", "1", "--state", "failed").stdout
    assert [row[0] for row in csv.reader(io.StringIO(one))] == ["id", "evil"]


@pytest.mark.parametrize(
    ("value", "safe"),
    [
        ("=1+1", "'=1+1"),
        ("+1", "'+1"),
        ("-1", "'-1"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("\tx", "'\tx"),
        ("\rx", "'\rx"),
        ("a=b", "a=b"),
        ("", ""),
    ],
)
def test_safe_cell(value: str, safe: str) -> None:
    assert safe_cell(value) == safe


@pytest.mark.parametrize(
    "flags", [["--json", "--csv"], ["--json", "--jsonl"], ["--jsonl", "--csv"]]
)
def test_the_output_flags_exclude_each_other(book: RedisBook, flags: list[str]) -> None:
    result = run_cli(book, "ls", *flags, columns=160)
    assert result.exit_code == 2
    assert "--json, --jsonl and --csv are mutually exclusive" in result.stderr
    assert " and ".join(flags) in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("value", "cell"), [(None, ""), (500, "500"), (1_234_567, "1234567"), (2.5, "2.5")]
)
def test_number_cells_keep_every_digit(value: float | None, cell: str) -> None:
    # A 20-minute runtime in ms once came out as 1.23457e+06 (format "g").
    assert number_cell(value) == cell
