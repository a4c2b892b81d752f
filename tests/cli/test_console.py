"""The operator console's commands (``ls`` filters, ``status`` info, ``workers``,
``stats``) through click's runner, on RedisBook with real Redis."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import click
import pytest
from click.testing import Result

from asyncbook import CreateSpec, RedisBook, WorkerRecord
from asyncbook._console import MinuteStats, PublishInfo
from asyncbook.cli import _console_stats, _console_units

from ..support.cli import run as run_cli

pytestmark = pytest.mark.redis

HOUR = 3_600_000


def run(book: RedisBook, *args: str, columns: int = 160) -> Result:
    return run_cli(book, *args, columns=columns)


def ok_json(book: RedisBook, *args: str) -> object:
    result = run(book, *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def task(book: RedisBook, task_id: str, name: str, created_ms: int, **info: str) -> None:
    publish = PublishInfo(name=name, **info)
    book.create(id=task_id, now_ms=created_ms, ttl_ms=48 * HOUR, max_attempts=2, info=publish)


def start(book: RedisBook, task_id: str, at_ms: int, worker: str) -> None:
    book.apply(task_id, {"type": "start", "atMs": at_ms, "worker": worker})


def succeed(book: RedisBook, task_id: str, at_ms: int) -> None:
    book.apply(task_id, {"type": "succeed", "atMs": at_ms, "resultRef": "r", "resultHash": "h"})


def fail(book: RedisBook, task_id: str, at_ms: int, **failure: str) -> None:
    event = {"type": "fail", "atMs": at_ms, "error": "boom", "retryable": False, **failure}
    book.apply(task_id, event)


@pytest.fixture
def shop(book: RedisBook) -> int:
    """Five tasks of two names on two workers, created over the last two hours."""
    now = book.now_ms()
    task(book, "mail-1", "mail.send", now - 2 * HOUR)
    task(book, "mail-2", "mail.send", now - 30 * 60_000)
    task(book, "img-1", "img.resize", now - 20 * 60_000)
    task(book, "mail-3", "mail.send", now - 60_000)
    task(book, "img-2", "img.resize", now - 10_000)
    start(book, "mail-2", now - 3_000, "w1")
    succeed(book, "mail-2", now - 2_800)
    start(book, "mail-3", now - 2_000, "w1")
    start(book, "img-1", now - 1_500, "w2")
    fail(book, "img-1", now - 500)
    return now


def ids(page: object) -> list[str]:
    assert isinstance(page, dict)
    return [row["id"] for row in page["tasks"]]


def test_ls_by_name_and_state_with_totals(book: RedisBook, shop: int) -> None:
    page = ok_json(book, "ls", "--name", "mail.send")
    assert ids(page) == ["mail-3", "mail-2", "mail-1"]
    assert isinstance(page, dict)
    assert page["tasks"][0]["info"]["name"] == "mail.send"
    assert page["totals"]["queued"] == 1
    assert (page["totals"]["running"], page["totals"]["succeeded"]) == (1, 1)
    running = ok_json(book, "ls", "--name", "mail.send", "--state", "running")
    assert ids(running) == ["mail-3"]
    table = run(book, "ls", "--name", "img.resize")
    assert table.exit_code == 0, table.output
    for text in ("img-1", "img-2", "img.resize", "w2", "failed", "queued 1", "failed 1"):
        assert text in table.stdout


@pytest.mark.parametrize(
    "flags", [[], ["--name", "mail.send"], ["--state", "running"], ["--worker", "w1"]]
)
def test_ls_json_has_one_shape_whatever_the_filters(
    book: RedisBook, shop: int, flags: list[str]
) -> None:
    page = ok_json(book, "ls", *flags)
    assert isinstance(page, dict)
    assert set(page) == {"tasks", "totals", "totalsExact", "nextAfter"}
    row = next(row for row in page["tasks"] if row["id"] == "mail-3")
    assert (row["state"], row["info"]["name"], row["info"]["worker"]) == (
        "running",
        "mail.send",
        "w1",
    )
    assert "history" not in row
    assert "task" not in row


def test_ls_by_worker_id_prefix_and_sort(book: RedisBook, shop: int) -> None:
    assert ids(ok_json(book, "ls", "--worker", "w1")) == ["mail-3", "mail-2"]
    assert ids(ok_json(book, "ls", "--q", "img")) == ["img-2", "img-1"]
    assert ids(ok_json(book, "ls", "--id-prefix", "img", "--sort", "oldest")) == [
        "img-1",
        "img-2",
    ]
    assert ids(ok_json(book, "ls", "--name", "nothing.such")) == []


@pytest.mark.parametrize("sort", ["-runtime", "runtime:desc"])
def test_ls_sorts_over_every_match(book: RedisBook, shop: int, sort: str) -> None:
    # img-1 ran 1 s, mail-2 200 ms; the others have no runtime: last, newest first.
    slowest = ["img-1", "mail-2", "img-2", "mail-3", "mail-1"]
    assert ids(ok_json(book, "ls", "--sort", sort)) == slowest
    first = ok_json(book, "ls", f"--sort={sort}", "--limit", "1")
    assert isinstance(first, dict)
    rest = ok_json(book, "ls", "--sort", sort, "--after", first["nextAfter"], "--limit", "1")
    assert ids(first) + ids(rest) == slowest[:2]
    assert ids(ok_json(book, "ls", "--q", "RESIZE")) == ["img-2", "img-1"]  # by name


def test_ls_since_and_until(book: RedisBook, shop: int) -> None:
    assert ids(ok_json(book, "ls", "--since", "1h")) == ["img-2", "mail-3", "img-1", "mail-2"]
    assert ids(ok_json(book, "ls", "--since", "15m", "--name", "mail.send")) == ["mail-3"]
    until = datetime.fromtimestamp((shop - HOUR) / 1000, UTC).isoformat()
    assert ids(ok_json(book, "ls", "--until", until)) == ["mail-1"]
    since_ms = str(shop - 25 * 60_000)
    assert ids(ok_json(book, "ls", "--since", since_ms, "--until", "5m")) == ["img-1"]


def test_plain_ls_json_keeps_its_shape_and_the_table_shows_names(
    book: RedisBook, shop: int
) -> None:
    page = ok_json(book, "ls", "--limit", "2")
    assert isinstance(page, dict)
    assert [t["id"] for t in page["tasks"]] == ["img-2", "mail-3"]
    assert "nextAfter" in page
    table = run(book, "ls")
    assert table.exit_code == 0, table.output
    assert "mail.send" in table.stdout
    assert "succeeded 1" in table.stdout


def test_ls_pages_past_one_search(book: RedisBook) -> None:
    now = book.now_ms()
    specs = [
        CreateSpec(f"t{i:04}", now - 1000 + i, HOUR, 1, info=PublishInfo(name="bulk"))
        for i in range(620)
    ]
    book.create_many(specs)
    page = ok_json(book, "ls", "--name", "bulk", "--limit", "600")
    assert isinstance(page, dict)
    assert len(page["tasks"]) == 600
    assert page["totals"]["queued"] == 620
    rest = ok_json(book, "ls", "--name", "bulk", "--after", page["nextAfter"])
    assert ids(rest) == [f"t{i:04}" for i in range(19, -1, -1)]


def test_ls_keeps_ids_whole_in_a_narrow_terminal(book: RedisBook) -> None:
    now = book.now_ms()
    ids = [str(uuid.uuid4()) for _ in range(3)]
    for index, task_id in enumerate(ids):
        task(book, task_id, "proj.media.tasks.generate_thumbnail", now - index)
        start(book, task_id, now, "celery@worker-host-1.example.internal")
    for columns in (80, 60, 40):
        table = run(book, "ls", columns=columns)
        assert table.exit_code == 0, table.output
        for task_id in ids:
            assert task_id in table.stdout, (columns, table.stdout)
        longest = max(len(line) for line in table.stdout.splitlines()[:4])
        assert longest <= max(columns, 36 + 2 + 9 + 2 + 4 + 2 + 5), (columns, table.stdout)
    at_80 = run(book, "ls", columns=80).stdout
    assert "proj.media.tasks.generate_thumbnail" not in at_80  # cut instead of the id
    assert "proj.med…" in at_80
    assert "running" in at_80
    wide = run(book, "ls", columns=200).stdout
    assert "proj.media.tasks.generate_thumbnail" in wide
    assert "celery@worker-host-1.example.internal" in wide


def test_status_prints_the_deadline_as_a_time(book: RedisBook) -> None:
    now = book.now_ms()
    task(book, "d", "mail.send", now)  # 48 h to go
    out = run(book, "status", "d").stdout
    deadline = datetime.fromtimestamp((now + 48 * HOUR) / 1000, UTC)
    assert f"deadline     {deadline.isoformat(timespec='seconds')[:-6]}Z (in 1d 23h)" in out
    assert str(now + 48 * HOUR) not in out
    body = ok_json(book, "status", "d")
    assert isinstance(body, dict)
    assert body["expiresAtMs"] == now + 48 * HOUR  # scripts keep the ms
    book.create(id="gone", now_ms=now - 2 * HOUR, ttl_ms=HOUR, max_attempts=1)
    assert "(1h ago)" in run(book, "status", "gone").stdout


def test_status_shows_the_info_below_the_summary(book: RedisBook) -> None:
    now = book.now_ms()
    info = {"args": "('[bold]x', 2)", "kwargs": "{'token': '***'}", "queue": "mail"}
    task(book, "m", "mail.send", now - 5_000, **info)
    start(book, "m", now - 4_000, "celery@host-1")
    trace = "Traceback (most recent call last):\n  File \"m.py\", line 3\nKeyError: '[x]'"
    fail(book, "m", now - 1_500, exception="KeyError", traceback=trace)
    table = run(book, "status", "m")
    assert table.exit_code == 0, table.output
    out = table.stdout
    assert out.index("state") < out.index("mail.send")
    for text in ("('[bold]x', 2)", "{'token': '***'}", "celery@host-1", "2.5 s", "mail"):
        assert text in out
    assert "KeyError" in out
    assert 'File "m.py", line 3' in out
    assert "KeyError: '[x]'" in out
    body = ok_json(book, "status", "m")
    assert isinstance(body, dict)
    assert (body["id"], body["state"], body["version"]) == ("m", "failed", 2)
    assert body["info"]["name"] == "mail.send"
    assert body["info"]["worker"] == "celery@host-1"
    assert body["info"]["runtimeMs"] == 2_500
    assert body["info"]["args"] == "('[bold]x', 2)"
    assert (body["info"]["exception"], body["info"]["traceback"]) == ("KeyError", trace)


def test_status_of_a_task_created_without_info(book: RedisBook) -> None:
    book.create(id="plain", now_ms=book.now_ms(), ttl_ms=HOUR, max_attempts=1)
    body = ok_json(book, "status", "plain")
    assert isinstance(body, dict)
    assert body["info"]["id"] == "plain"
    assert "name" not in body["info"]
    assert run(book, "status", "nope", "--json").exit_code == 1


def test_workers(book: RedisBook, shop: int) -> None:
    found = ok_json(book, "workers")
    assert isinstance(found, list)
    by_name = {worker["name"]: worker for worker in found}
    assert set(by_name) == {"w1", "w2"}
    assert by_name["w1"]["running"] == ["mail-3"]
    assert (by_name["w1"]["started"], by_name["w1"]["succeeded"]) == (2, 1)
    assert (by_name["w2"]["running"], by_name["w2"]["failed"]) == ([], 1)
    assert found[0]["name"] == "w2"  # seen last
    table = run(book, "workers", "--within", "10m")
    assert table.exit_code == 0, table.output
    assert "1: mail-3" in table.stdout
    assert " ago" in table.stdout


def test_workers_none_seen(book: RedisBook) -> None:
    table = run(book, "workers")
    assert table.exit_code == 0, table.output
    assert "no worker seen within 1h" in table.stdout


def test_stats_per_minute_and_per_five_minutes(book: RedisBook, shop: int) -> None:
    body = ok_json(book, "stats", "--name", "mail.send")
    assert isinstance(body, dict)
    assert body["name"] == "mail.send"
    assert len(body["minutes"]) == 60
    assert (body["totals"]["started"], body["totals"]["succeeded"]) == (2, 1)
    every = ok_json(book, "stats", "--window", "2h")
    assert isinstance(every, dict)
    assert every["totals"]["failed"] == 1
    table = run(book, "stats", "--window", "2h")
    assert table.exit_code == 0, table.output
    out = table.stdout
    assert "per 5 minutes" in out
    assert "failure rate 50.0%" in out
    assert "quiet row(s) left out" in out
    full = run(book, "stats", "--window", "2h", "--empty")
    assert full.stdout.count("\n") > out.count("\n") + 20


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["ls", "--since", "yesterday"], "--since"),
        (["ls", "--until", "10x"], "--until"),
        (["ls", "--since", "1960-01-01"], "--since"),
        (["ls", "--since", "1h", "--until", "2h"], "--until"),
        (["ls", "--name", ""], "--name"),
        (["ls", "--name", "n" * 201], "--name"),
        (["ls", "--worker", ""], "--worker"),
        (["ls", "--q", ""], "--q"),
        (["ls", "--sort", "sideways"], "--sort"),
        (["ls", "--sort", "-id"], "--sort"),
        (["ls", "--sort", "-runtime", "--after", "12"], "--after"),
        (["ls", "--name", "x", "--after", "abc"], "--after"),
        (["workers", "--within", "0s"], "--within"),
        (["workers", "--within", "2d"], "--within"),
        (["stats", "--window", "30s"], "--window"),
        (["stats", "--window", "25h"], "--window"),
        (["stats", "--window", "an hour"], "--window"),
        (["stats", "--name", ""], "--name"),
    ],
)
def test_bad_input_is_a_usage_error_naming_the_option(
    book: RedisBook, args: list[str], option: str
) -> None:
    result = run(book, *args)
    assert result.exit_code == 2, result.output
    assert option in result.stderr
    assert "Traceback" not in result.output


def test_times_and_durations_are_read_as_documented(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_console_units, "now_ms", lambda: 100 * HOUR)
    ctx = click_context()
    when = _console_units.when_option
    assert when(ctx, ctx.command.params[0], "10m") == 100 * HOUR - 600_000
    assert when(ctx, ctx.command.params[0], "1d") == 76 * HOUR
    assert when(ctx, ctx.command.params[0], "1700000000000") == 1_700_000_000_000
    assert when(ctx, ctx.command.params[0], "2023-11-14T22:13:20Z") == 1_700_000_000_000
    assert when(ctx, ctx.command.params[0], "2023-11-14T22:13:20") == 1_700_000_000_000
    assert when(ctx, ctx.command.params[0], "2023-11-14T23:13:20+01:00") == 1_700_000_000_000
    assert when(ctx, ctx.command.params[0], None) is None
    window = _console_units.duration_option(60_000, 86_400_000)
    assert window(ctx, ctx.command.params[0], "90s") == 90_000
    assert window(ctx, ctx.command.params[0], "1d") == 86_400_000


def click_context() -> click.Context:
    return click.Context(click.Command("x", params=[click.Option(["--x"])]))


def test_five_minute_rows_merge_counts_and_runtimes() -> None:
    buckets = (1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    minutes = [
        MinuteStats(minute_ms=m * 60_000, started=1, succeeded=1, runtime_buckets=buckets)
        for m in range(10)
    ]
    rows = _console_stats._stats_rows(minutes, 5)
    assert [row.minute_ms for row in rows] == [0, 300_000]
    assert [row.started for row in rows] == [5, 5]
    assert rows[0].runtime_buckets[0] == 5
    assert rows[0].p50_ms == pytest.approx(50.0)


def test_workers_online_first_with_their_pool_and_queues(book: RedisBook, shop: int) -> None:
    book.announce_worker(
        WorkerRecord(name="w1", pid=9, pool="prefork", concurrency=4, queues=("mail", "celery"))
    )
    book.retire_worker(WorkerRecord(name="gone@host", pid=3, pool="threads", queues=("video",)))
    found = ok_json(book, "workers")
    assert isinstance(found, list)
    states = [(w["name"], w.get("online")) for w in found]
    assert states[0] == ("w1", True)  # online first
    assert set(states[1:]) == {("gone@host", False), ("w2", None)}  # w2: no record kept
    assert found[0]["record"]["queues"] == ["mail", "celery"]
    table = run(book, "workers")
    assert table.exit_code == 0, table.output
    for shown in ("online", "prefork x4", "offline", "video"):
        assert shown in table.stdout
