"""``asyncbook queues``: the broker's queues as a table and as JSON, asyncbook's own with the
sweep's health; no broker, a broker down, bad options; ``serve --broker``'s option."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest

from asyncbook import RedisBook
from asyncbook._queues import shown_url

from ..support.broker import (
    AMQP_URL,
    CONSUMED_SENT,
    PREFETCHED,
    BusyBroker,
    amqp_answers,
    amqp_queue,
    busy_broker,
)
from ..support.celery import CELERY_URL, unique
from ..support.cli import run


@pytest.fixture
def busy(book: RedisBook) -> Iterator[BusyBroker]:
    with busy_broker(book) as running:
        yield running


def test_json_has_each_queue_and_asyncbooks_own(book: RedisBook, busy: BusyBroker) -> None:
    result = run(book, "queues", "--broker", CELERY_URL, "--asyncbook-queue", busy.own, "--json")
    assert result.exit_code == 0, result.output
    answer = json.loads(result.output)
    queues = {queue["name"]: queue for queue in answer["queues"]}
    consumed = queues[busy.consumed]
    assert (consumed["ready"], consumed["unacked"]) == (CONSUMED_SENT - PREFETCHED, PREFETCHED)
    assert queues[busy.prioritized]["priorities"] == {"0": 1, "3": 1, "6": 0, "9": 2}
    assert consumed["oldestTaskId"] == busy.consumed_ids[PREFETCHED]
    assert consumed["oldestAgeMs"] >= 0
    assert answer["asyncbook"]["queue"] == busy.own
    assert answer["asyncbook"]["ready"] == 0
    assert set(answer["asyncbook"]["health"]) >= {"ok", "lastSweepMs", "overdueTasks"}


def test_the_table(book: RedisBook, busy: BusyBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASYNCBOOK_BROKER_URL", CELERY_URL)
    result = run(book, "queues", "--asyncbook-queue", busy.own, "--queue", "extra", columns=200)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    row = next(line for line in lines if busy.consumed in line)
    cells = [cell.strip() for cell in row.split("│")[1:-1]]
    assert cells[:4] == [busy.consumed, "3", "0:3 3:0 6:0 9:0", "2"]
    assert cells[5].endswith(("ms", "s"))
    assert any(line.strip().startswith("│ extra ") for line in lines)
    assert f"broker {CELERY_URL} (redis)" in result.output
    assert f"asyncbook queue {busy.own}, 0 waiting; sweep " in result.output


def test_without_a_broker_it_shows_asyncbooks_side(book: RedisBook) -> None:
    result = run(book, "queues", "--json")
    assert result.exit_code == 1, result.output  # issue 30: no broker is an error
    answer = json.loads(result.stdout)
    assert answer["broker"]["configured"] is False
    assert answer["queues"] == []
    assert answer["asyncbook"]["health"]["ok"] is True
    text = run(book, "queues")
    assert "no broker configured" in text.output
    assert "asyncbook queue asyncbook; sweep never ran, 0 overdue" in text.output


def test_a_broker_that_does_not_answer_exits_1(book: RedisBook) -> None:
    result = run(book, "queues", "--broker", "redis://127.0.0.1:1/0")
    assert result.exit_code == 1
    assert "cannot read the broker" in result.output


def test_a_broker_of_another_kind_is_said_so(book: RedisBook) -> None:
    result = run(book, "queues", "--broker", "sqs://", "--json")
    assert result.exit_code == 1
    assert "only Redis" in json.loads(result.output.splitlines()[0])["broker"]["problem"]


@pytest.mark.skipif(not amqp_answers(), reason="no RabbitMQ at ASYNCBOOK_TEST_AMQP_URL")
def test_an_amqp_broker_one_queue_at_a_time(book: RedisBook) -> None:
    with amqp_queue() as name:
        result = run(book, "queues", "--broker", AMQP_URL, "--queue", name, "--json")
    assert result.exit_code == 0, result.output
    answer = json.loads(result.output)
    assert answer["broker"]["kind"] == "amqp"
    assert answer["broker"]["url"] == shown_url(AMQP_URL)
    assert ":***@" in answer["broker"]["url"]
    row = next(queue for queue in answer["queues"] if queue["name"] == name)
    assert (row["ready"], row["consumers"], row["unacked"]) == (2, 1, None)
    assert row["oldestAgeMs"] is None
    table = run(book, "queues", "--broker", AMQP_URL)
    assert "AMQP lists no queues: name other queues with --queue" in table.output


@pytest.mark.parametrize(
    "args",
    [
        ("--queue", "x" * 201),
        ("--queue", "a\tb"),
        ("--asyncbook-queue", ""),
        ("--limit", "0"),
        ("--broker", "redis://127.0.0.1:notaport/0"),
        ("--broker", "amqp://guest:guest@127.0.0.1:notaport//"),
        ("--broker", "amqp://[::1//"),
        tuple(arg for n in range(51) for arg in ("--queue", f"q{n}")),
    ],
)
def test_bad_options_are_usage_errors(book: RedisBook, args: tuple[str, ...]) -> None:
    result = run(book, "queues", *args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output


def test_serve_takes_the_broker_options(book: RedisBook) -> None:
    result = run(book, "serve", "--help")
    assert "--broker URL" in result.output
    assert "ASYNCBOOK_BROKER_URL" in result.output
    assert "--asyncbook-queue" in result.output
    bad = run(book, "serve", "--asyncbook-queue", unique("q") + "\n", "--port", "0")
    assert bad.exit_code == 2


def test_the_sweeps_health_as_the_health_check_reads_it(book: RedisBook) -> None:
    now = book.now_ms()
    book.record_sweep(now - 2_000)
    # The book's clock moves on between the two reads: a second may tick.
    running = r"sweep running \(last [23]\.[0-9] s ago\), 0 overdue"
    assert re.search(running, run(book, "queues").output)
    book.create(id="late", now_ms=now - 90_000, ttl_ms=1_000, max_attempts=1)
    book.record_sweep(now - 60_000)
    result = run(book, "queues", "--json")
    health = json.loads(result.stdout)["asyncbook"]["health"]
    assert (health["ok"], health["overdueTasks"], health["sweepStopped"]) == (False, 1, True)
    stopped = r"sweep stopped \(last 1m( 0[0-9]s)? ago\), 1 overdue"
    assert re.search(stopped, run(book, "queues").output)
