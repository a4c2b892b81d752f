"""``asyncbook doctor`` against real servers: a throwaway redis-server for the settings
it checks (CONFIG SET there only), the shared one for the app's checks."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from asyncbook import RedisBook, sweep
from asyncbook.cli import cli
from asyncbook.cli._demo import WebhookReceiver
from asyncbook.cli._doctor import clock_check, queue_check, server_check, sink_checks

from ..support.books import REDIS_URL, delete_namespace
from ..support.servers import free_port, redis_server, wait_until

pytestmark = pytest.mark.redis

SHARED = REDIS_URL  # the shared test Redis


@pytest.fixture(scope="module")
def throwaway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    with redis_server(tmp_path_factory.mktemp("doctor"), "--port", str(port)):
        client = redis.Redis(port=port)
        wait_until(client.ping)
        client.close()
        yield f"redis://127.0.0.1:{port}/0"


def doctor(url: str, namespace: str, *args: str) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(
        cli, ["--redis-url", url, "--namespace", namespace, "doctor", "--json", *args]
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, json.loads(result.output)


def by_name(answer: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {check["name"]: check for check in answer["checks"]}


def test_doctor_names_each_problem_with_its_fix(throwaway: str) -> None:
    client = redis.Redis.from_url(throwaway)
    client.config_set("maxmemory", "100mb")
    client.config_set("maxmemory-policy", "allkeys-lru")
    # Started with neither AOF nor snapshots; nothing written in "shop", one other.
    RedisBook(client, namespace="other").create(id="t", now_ms=0, ttl_ms=1, max_attempts=1)
    code, answer = doctor(throwaway, "shop")
    checks = by_name(answer)
    assert (code, answer["ok"]) == (1, False)
    assert checks["server"]["status"] == "ok"
    assert checks["server"]["detail"].startswith(("Redis 7", "Redis 8", "Valkey"))
    assert checks["scripting"]["status"] == "ok"
    assert checks["eviction"]["status"] == "problem"
    assert "allkeys-lru" in checks["eviction"]["detail"]
    assert "noeviction" in checks["eviction"]["fix"]
    assert checks["persistence"]["status"] == "problem"
    assert "appendonly yes" in checks["persistence"]["fix"]
    assert checks["namespace"]["status"] == "problem"
    assert "'shop' has never been written" in checks["namespace"]["detail"]
    assert "namespaces written here: other" in checks["namespace"]["detail"]
    assert checks["clock"]["status"] == "ok"
    assert checks["workers"]["status"] == "skipped"  # no app given

    # Fixed: noeviction, AOF, the namespace written and swept.
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("appendonly", "yes")
    book = RedisBook(client, namespace="shop")
    book.create(id="order-1", now_ms=book.now_ms(), ttl_ms=60_000, max_attempts=1)
    code, answer = doctor(throwaway, "shop")
    checks = by_name(answer)
    assert checks["sweep"]["status"] == "warning"  # never swept, but nothing waits yet
    sweep(book)
    code, answer = doctor(throwaway, "shop")
    assert (code, answer["ok"]) == (0, True), answer
    assert by_name(answer)["persistence"]["detail"].startswith("AOF")
    assert by_name(answer)["sweep"]["status"] == "ok"

    # A task overdue while no sweep ran for 30 s: a problem.
    book.create(id="late", now_ms=book.now_ms() - 90_000, ttl_ms=1_000, max_attempts=1)
    book.record_sweep(book.now_ms() - 60_000)
    code, answer = doctor(throwaway, "shop")
    assert code == 1
    assert "1 task(s) past their deadline" in by_name(answer)["sweep"]["detail"]
    client.config_set("appendonly", "no")
    client.flushall()
    client.close()


def test_doctor_names_the_libraries_other_versions_left_loaded(throwaway: str) -> None:
    client = redis.Redis.from_url(throwaway)
    book = RedisBook(client, namespace="upgraded")
    book.create(id="t", now_ms=0, ttl_ms=60_000, max_attempts=1)  # loads this version's
    _, answer = doctor(throwaway, "upgraded")
    assert by_name(answer)["functions"]["status"] == "ok"
    # An earlier version's book library, and a caller's events script (not the book's).
    for name, function in (
        ("asyncbook_0123456789ab", "apply"),
        ("asyncbook_ba9876543210", "events"),
    ):
        client.function_load(
            f"#!lua name={name}\n"
            f"redis.register_function('{name}_{function}', function() return 1 end)"
        )
    _, answer = doctor(throwaway, "upgraded")
    check = by_name(answer)["functions"]
    assert check["status"] == "warning"
    assert check["detail"].startswith("1 library(ies) of other asyncbook versions loaded")
    assert check["fix"].startswith(
        "once no process of those versions runs: FUNCTION DELETE asyncbook_0123456789ab ("
    )
    client.function_delete("asyncbook_0123456789ab")
    _, answer = doctor(throwaway, "upgraded")
    assert by_name(answer)["functions"]["status"] == "ok"
    # A process that still calls a deleted library loads it again.
    client.function_flush()
    assert book.get("t") is not None
    client.function_flush()
    client.flushall()
    client.close()


def test_doctor_prints_a_line_per_check(throwaway: str) -> None:
    result = CliRunner().invoke(cli, ["--redis-url", throwaway, "--namespace", "x", "doctor"])
    assert result.exit_code == 1
    assert "[FAIL] persistence: neither AOF nor RDB snapshots" in result.output
    assert "       fix: CONFIG SET appendonly yes" in result.output
    assert result.output.rstrip().endswith("problem(s)")


def test_an_unreachable_server_is_one_problem() -> None:
    code, answer = doctor(f"redis://127.0.0.1:{free_port()}/0", "x")
    assert code == 1
    (check,) = answer["checks"][:1]
    assert (check["name"], check["status"]) == ("server", "problem")
    assert "cannot reach" in check["detail"]


def test_a_clock_off_the_servers_and_an_old_server_are_problems() -> None:
    client = redis.Redis.from_url(SHARED)
    try:
        check = clock_check(client, clock=lambda: time.time() + 5)
    finally:
        client.close()
    assert check.status == "problem"
    found = re.search(r"this host is \+(\d+) ms off the server", check.detail)
    assert found is not None, check.detail
    # Within the measurement's error: half a round trip, and ms rounding, on a busy box.
    assert abs(int(found.group(1)) - 5000) <= 50
    assert server_check({"redis_version": "6.2.14"}).status == "problem"
    assert server_check({"redis_version": "7.2.4"}).detail == "Redis 7.2.4"
    assert server_check({"redis_version": "7.2.4", "valkey_version": "8.1.1"}).status == "ok"
    assert server_check({"redis_version": "7.2.4", "valkey_version": "8.0.2"}).status == "problem"
    assert server_check({"dragonfly_version": "df-v1.2"}).status == "problem"


APP = """
from celery import Celery
from asyncbook.celery import install

app = Celery("{name}", broker="{broker}")
app.conf.asyncbook_redis_url = "{broker}"
app.conf.asyncbook_namespace = "{namespace}"
app.conf.asyncbook_sinks = ["{reachable}", "http://127.0.0.1:{closed}/hook", "nope.missing:fn"]
{install}
"""


@pytest.fixture
def app_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def write_app(folder: Path, namespace: str, receiver: WebhookReceiver, install: bool) -> str:
    module = f"doctorapp_{uuid.uuid4().hex[:8]}"
    (folder / f"{module}.py").write_text(
        APP.format(
            name=module,
            broker=SHARED,
            namespace=namespace,
            reachable=receiver.url,
            closed=free_port(),
            install="install(app)" if install else "",
        )
    )
    return module


def test_with_an_app_doctor_reads_its_book_workers_and_sinks(app_dir: Path, namespace: str) -> None:
    receiver = WebhookReceiver()
    shared = redis.Redis.from_url(SHARED)
    try:
        book = RedisBook(shared, namespace=namespace)
        book.create(id="t", now_ms=book.now_ms(), ttl_ms=60_000, max_attempts=1)
        module = write_app(app_dir, namespace, receiver, install=True)
        # --namespace names another: the app's own namespace is read.
        code, answer = doctor(SHARED, "elsewhere", "-A", module, "--timeout", "0.5")
        checks = answer["checks"]
        names = [check["name"] for check in checks]
        assert code == 1
        assert by_name(answer)["namespace"]["status"] == "ok"
        assert by_name(answer)["install"]["detail"] == f"installed; namespace {namespace!r}"
        assert by_name(answer)["workers"]["status"] == "problem"  # nobody runs it here
        assert "no worker answered" in by_name(answer)["workers"]["detail"]
        sinks = [check for check in checks if check["name"] == "sink"]
        assert [sink["status"] for sink in sinks] == ["ok", "problem", "problem"]
        assert "unreachable" in sinks[1]["detail"]
        assert "does not load" in sinks[2]["detail"]
        assert "workers" in names

        plain = write_app(app_dir, namespace, receiver, install=False)
        code, answer = doctor(SHARED, namespace, "-A", plain)
        assert code == 1
        assert by_name(answer)["install"]["status"] == "problem"
        assert "install(app)" in by_name(answer)["install"]["fix"]
    finally:
        receiver.close()
        delete_namespace(shared, namespace)
        shared.close()


@pytest.mark.parametrize(
    ("secret", "expected"),
    [
        ('"whsec_" + "A" * 32', ("ok", "accepts connections; signed with 1 secret(s)")),
        ('"whsec_oops"', ("problem", "asyncbook_webhook_secret must hold 24 to 64 bytes")),
    ],
    ids=["signed", "bad-secret"],
)
def test_doctor_says_whether_webhooks_are_signed_and_names_a_bad_secret(
    app_dir: Path, namespace: str, secret: str, expected: tuple[str, str]
) -> None:
    receiver = WebhookReceiver()
    try:
        module = write_app(app_dir, namespace, receiver, install=True)
        path = app_dir / f"{module}.py"
        path.write_text(path.read_text() + f"app.conf.asyncbook_webhook_secret = {secret}\n")
        code, answer = doctor(SHARED, namespace, "-A", module, "--timeout", "0.5")
        assert code == 1
        status, detail = expected
        check = next(c for c in answer["checks"] if detail in c["detail"])
        assert check["status"] == status
        if status == "problem":  # the settings do not read: named, with its fix
            assert (check["name"], check["fix"]) == ("settings", "fix asyncbook_webhook_secret")
            assert "oops" not in check["detail"]
    finally:
        receiver.close()


def test_doctor_shows_a_webhook_url_without_its_credentials() -> None:
    receiver = WebhookReceiver()
    try:
        reachable = receiver.url.replace("http://", "http://alice:pa55@") + "?token=s3cret"
        unreachable = f"http://alice:pa55@127.0.0.1:{free_port()}/hook?token=s3cret"
        checks = list(sink_checks((reachable, unreachable), 0.5))
    finally:
        receiver.close()
    assert [check.status for check in checks] == ["ok", "problem"]
    for check in checks:
        assert "***@127.0.0.1" in check.detail
        assert "token=***" in check.detail
        assert "pa55" not in check.detail
        assert "s3cret" not in check.detail


def test_an_app_that_does_not_load_is_a_usage_error(app_dir: Path) -> None:
    result = CliRunner().invoke(cli, ["doctor", "-A", "no_such_module_here"])
    assert result.exit_code == 2
    assert "cannot load the Celery app 'no_such_module_here'" in result.output


class Answers:
    """``app.control.inspect(timeout=...).active_queues()`` answering ``queues``."""

    def __init__(self, queues: dict[str, list[dict[str, str]]] | None) -> None:
        self.queues = queues
        self.control = self

    def inspect(self, timeout: float) -> Answers:
        return self

    def active_queues(self) -> dict[str, list[dict[str, str]]] | None:
        return self.queues


def test_the_queue_check_reads_which_workers_consume_asyncbooks_queue() -> None:
    both = {"w1@h": [{"name": "celery"}, {"name": "asyncbook"}], "w2@h": [{"name": "celery"}]}
    check = queue_check(Answers(both), "asyncbook", worker_sweep=True, timeout=1)
    assert (check.status, check.detail) == ("ok", "2 worker(s) answered; w1@h consume 'asyncbook'")
    mine = {"w2@h": [{"name": "celery"}]}
    check = queue_check(Answers(mine), "asyncbook", worker_sweep=True, timeout=1)
    assert check.status == "warning"  # the workers sweep; beat's messages wait in the queue
    assert check.fix == "add it to a worker: celery -A <your app> worker -Q <your queues>,asyncbook"
    check = queue_check(Answers(mine), "asyncbook", worker_sweep=False, timeout=1)
    assert check.status == "problem"
    assert "asyncbook_worker_sweep is off: no sweep" in check.detail
    assert queue_check(Answers(None), "asyncbook", worker_sweep=True, timeout=1).status == "problem"


def test_an_app_whose_settings_do_not_read_is_checked_on_its_own_namespace(
    app_dir: Path, namespace: str
) -> None:
    receiver = WebhookReceiver()
    try:
        module = write_app(app_dir, namespace, receiver, install=True)
        path = app_dir / f"{module}.py"
        path.write_text(path.read_text() + 'app.conf.asyncbook_webhook_secret = "hunter2"\n')
        code, answer = doctor(SHARED, "elsewhere", "-A", module, "--timeout", "0.5")
        assert code == 1
        assert by_name(answer)["settings"]["fix"] == "fix asyncbook_webhook_secret"
        assert repr(namespace) in by_name(answer)["namespace"]["detail"]
        assert "elsewhere" not in by_name(answer)["namespace"]["detail"]
    finally:
        receiver.close()
