"""The ``asyncbook`` command, through click's runner, on RedisBook with real Redis."""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

import httpx
import pytest
import redis

from asyncbook import ProgressEvent, RedisBook, StartEvent, SucceedEvent
from asyncbook.web import BackgroundServer, feed_for

from ..support.books import delete_namespace
from ..support.cli import CLI_REDIS_URL, run
from ..support.servers import free_port

pytestmark = pytest.mark.redis

NOW = 1_000_000


def finish(book: RedisBook, task_id: str, steps: int = 3, pause: float = 0.0) -> None:
    book.create(id=task_id, now_ms=NOW, ttl_ms=10_000_000, max_attempts=1, exist_ok=True)
    book.apply(task_id, StartEvent(at_ms=NOW + 1, worker="w"))
    for i in range(1, steps + 1):
        time.sleep(pause)
        book.apply(task_id, ProgressEvent(at_ms=NOW + 1 + i, progress=i * 100 // steps, cursor="c"))
    book.apply(task_id, SucceedEvent(at_ms=NOW + 100, result_ref="s3://r", result_hash="h"))


def test_status_table_json_and_not_found(book: RedisBook) -> None:
    finish(book, "a/b ü")
    table = run(book, "status", "a/b ü")
    assert table.exit_code == 0, table.output
    assert "succeeded" in table.stdout
    as_json = json.loads(run(book, "status", "a/b ü", "--json").stdout)
    assert as_json["state"] == "succeeded"
    assert as_json["version"] == 5
    missing = run(book, "status", "nope")
    assert missing.exit_code == 1
    assert "no task 'nope'" in missing.stderr


def test_ls_pages_and_filters(book: RedisBook) -> None:
    for i in range(3):
        book.create(id=f"t{i}", now_ms=NOW, ttl_ms=60_000, max_attempts=1)
    finish(book, "done")
    page = json.loads(run(book, "ls", "--limit", "2", "--json").stdout)
    assert [t["id"] for t in page["tasks"]] == ["done", "t2"]
    rest = json.loads(
        run(book, "ls", "--limit", "2", "--after", page["nextAfter"], "--json").stdout
    )
    assert [t["id"] for t in rest["tasks"]] == ["t1", "t0"]
    assert rest["nextAfter"] is None
    queued = json.loads(run(book, "ls", "--state", "queued", "--json").stdout)
    assert [t["id"] for t in queued["tasks"]] == ["t2", "t1", "t0"]
    table = run(book, "ls")
    assert table.exit_code == 0
    assert "done" in table.stdout
    assert "succeeded" in table.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["ls", "--state", "done"],
        ["ls", "--limit", "0"],
        ["ls", "--after", "x"],
        ["status"],
        ["deliver", "t"],
        ["cancel"],
        ["cancel", "a", "b"],
        ["cancel", "t", "--reason"],
        ["watch", "t", "--cursor", "-1"],
        ["no-such-command"],
        ["serve", "--host", "0.0.0.0"],
        ["serve", "--max-streams", "0"],
    ],
)
def test_usage_errors_exit_2(book: RedisBook, args: list[str]) -> None:
    result = run(book, *args)
    assert result.exit_code == 2, result.output


def test_serve_without_token_refuses_a_public_address(book: RedisBook) -> None:
    result = run(book, "serve", "--host", "0.0.0.0")
    assert result.exit_code == 2
    assert "ASYNCBOOK_API_TOKEN" in result.stderr


def served_task(url: str, namespace: str, task_id: str) -> dict[str, Any]:
    """``asyncbook serve`` on ``url``: what its JSON API answers for ``task_id``; checks
    the page URL it prints and that it stops at SIGTERM."""
    port = free_port()
    env = dict(os.environ, ASYNCBOOK_REDIS_URL=url, ASYNCBOOK_NAMESPACE=namespace)
    env.pop("ASYNCBOOK_API_TOKEN", None)
    command = [sys.executable, "-m", "asyncbook.cli", "serve", "--port", str(port)]
    server = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert server.stdout is not None
        line = server.stdout.readline().decode()
        assert line.strip() == f"asyncbook status page: http://127.0.0.1:{port}/"
        deadline = time.monotonic() + 15
        while True:
            try:
                response = httpx.get(f"http://127.0.0.1:{port}/api/tasks/{task_id}", timeout=2)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
    finally:
        server.terminate()
        server.wait(15)
        assert server.stdout is not None
        server.stdout.close()
    # uvicorn shuts down gracefully, then re-raises the signal it caught.
    assert server.returncode == -signal.SIGTERM
    answer: dict[str, Any] = response.json()
    return answer


def test_serve_answers_on_loopback_and_prints_the_page_url(book: RedisBook) -> None:
    finish(book, "s")
    assert served_task(CLI_REDIS_URL, book.namespace, "s")["state"] == "succeeded"


def test_serve_reads_a_book_on_a_cluster(cluster_url: str) -> None:
    namespace = f"cli-{uuid.uuid4().hex[:8]}"
    book = RedisBook.from_url(cluster_url, namespace=namespace)
    try:
        finish(book, "on-cluster")
        assert served_task(cluster_url, namespace, "on-cluster")["state"] == "succeeded"
    finally:
        delete_namespace(book.client, namespace)
        book.client.close()


def test_bad_redis_url_is_a_usage_error(book: RedisBook) -> None:
    result = run(book, "status", "x", url="http://nowhere")
    assert result.exit_code == 2
    assert "--redis-url" in result.stderr


def test_history(book: RedisBook) -> None:
    finish(book, "h", steps=2)
    entries = json.loads(run(book, "history", "h", "--json").stdout)
    assert [e["version"] for e in entries] == [1, 2, 3, 4]
    assert entries[-1]["event"]["type"] == "succeed"
    table = run(book, "history", "h")
    assert "progress" in table.stdout
    assert run(book, "history", "nope").exit_code == 1


def test_deliver(book: RedisBook) -> None:
    finish(book, "a")
    finish(book, "b")
    first = json.loads(run(book, "deliver", "a", "--key", "k", "--json").stdout)
    assert first["reason"] == "delivered"
    again = run(book, "deliver", "a", "--key", "k")
    assert again.exit_code == 0
    assert again.stdout.startswith("duplicate-delivery: s3://r")
    other = run(book, "deliver", "b", "--key", "k")
    assert other.exit_code == 1
    assert "another task" in other.stderr
    assert "s3://r" not in other.output
    book.create(id="q", now_ms=NOW, ttl_ms=60_000, max_attempts=1)
    assert run(book, "deliver", "q", "--key", "k2").exit_code == 1
    assert run(book, "deliver", "nope", "--key", "k3").exit_code == 1


def live(book: RedisBook, task_id: str, *, running: bool = False) -> None:
    """A task due in an hour by the book's clock (the one ``cancel`` uses)."""
    now = book.now_ms()
    book.create(id=task_id, now_ms=now, ttl_ms=3_600_000, max_attempts=1)
    if running:
        book.apply(task_id, StartEvent(at_ms=now + 1, worker="w"))
        book.apply(task_id, ProgressEvent(at_ms=now + 2, progress=30, cursor="c"))


def test_cancel_a_queued_and_a_running_task(book: RedisBook) -> None:
    live(book, "q ü/1")
    live(book, "r", running=True)
    queued = run(book, "cancel", "q ü/1")
    assert queued.exit_code == 0, queued.output
    assert queued.stdout == "cancelled: q ü/1 (cancelled) at v1\n"
    running = run(book, "cancel", "r", "--reason", "user left", "--json")
    assert running.exit_code == 0, running.output
    body = json.loads(running.stdout)
    assert body["reason"] == "cancelled"
    assert (body["task"]["state"], body["task"]["error"]) == ("cancelled", "user left")
    assert body["task"]["progress"] == 30
    task = book.get("r")
    assert task is not None
    assert task.state == "cancelled"
    notes = book.drain_notifications()
    assert sorted(note.task_id for note in notes) == ["q ü/1", "r"]


def test_cancel_twice_is_ok_and_changes_nothing(book: RedisBook) -> None:
    live(book, "t")
    assert run(book, "cancel", "t", "--reason", "first").exit_code == 0
    again = run(book, "cancel", "t", "--reason", "second")
    assert again.exit_code == 0, again.output
    assert again.stdout.startswith("duplicate-cancel: t (first)")
    as_json = json.loads(run(book, "cancel", "t", "--json").stdout)
    assert (as_json["reason"], as_json["changed"], as_json["duplicate"]) == (
        "duplicate-cancel",
        False,
        True,
    )


def test_cancel_is_refused_for_a_task_that_ended_and_for_an_unknown_one(book: RedisBook) -> None:
    finish(book, "done")
    refused = run(book, "cancel", "done")
    assert refused.exit_code == 1
    assert refused.stdout == ""
    assert "already ended (succeeded)" in refused.stderr
    as_json = run(book, "cancel", "done", "--json")
    assert as_json.exit_code == 1
    assert json.loads(as_json.stdout)["reason"] == "terminal-conflict"
    assert json.loads(as_json.stdout)["task"]["state"] == "succeeded"
    book.create(id="late", now_ms=0, ttl_ms=1, max_attempts=1)  # overdue since 1970
    late = run(book, "cancel", "late")
    assert late.exit_code == 1
    assert "deadline had passed, so it expired" in late.stderr
    late_task = book.get("late")
    assert late_task is not None
    assert late_task.state == "expired"
    missing = run(book, "cancel", "nope")
    assert missing.exit_code == 1
    assert "no task 'nope'" in missing.stderr


def test_cancel_with_a_reason_that_is_no_text_is_a_usage_error(book: RedisBook) -> None:
    live(book, "t")
    # Bytes that are not UTF-8 in argv reach Python as lone surrogates.
    result = run(book, "cancel", "t", "--reason", "caf\udce9")
    assert result.exit_code == 2, result.output
    assert "Unicode" in result.stderr
    task = book.get("t")
    assert task is not None
    assert task.state == "queued"


def test_ls_filters_cancelled_tasks(book: RedisBook) -> None:
    live(book, "a")
    live(book, "b")
    run(book, "cancel", "a")
    page = json.loads(run(book, "ls", "--state", "cancelled", "--json").stdout)
    assert [task["id"] for task in page["tasks"]] == ["a"]
    assert page["tasks"][0]["state"] == "cancelled"
    table = run(book, "ls", "--state", "cancelled")
    assert table.exit_code == 0
    assert "cancelled" in table.stdout
    assert "cancelled" in run(book, "ls", "--help").stdout


def group_of(book: RedisBook, group_id: str, count: int, *, seal: bool = True) -> list[str]:
    ids = [f"{group_id}#{n}" for n in range(count)]
    for task_id in ids:
        book.create(id=task_id, now_ms=NOW, ttl_ms=10**15, max_attempts=2, group_id=group_id)
    if seal:
        book.seal_group(group_id, count)
    return ids


def test_group_prints_counts_progress_and_members(book: RedisBook) -> None:
    ids = group_of(book, "batch/7 ü", 3)
    finish(book, ids[0])
    book.apply(ids[1], StartEvent(at_ms=NOW + 1, worker="w"))
    book.apply(ids[1], ProgressEvent(at_ms=NOW + 2, progress=50, cursor="c"))
    result = run(book, "group", "batch/7 ü")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "group batch/7 ü: 3 member(s), total 3, progress 50%, not ended"
    assert lines[1] == "queued 1  running 1  succeeded 1  failed 0  expired 0  cancelled 0"
    table = "\n".join(lines[2:])
    for task_id, state, progress in zip(
        ids, ("succeeded", "running", "queued"), ("100%", "50%", "0%"), strict=True
    ):
        row = next(line for line in lines if task_id in line)
        assert state in row
        assert progress in row
    assert table.index(ids[0]) < table.index(ids[1]) < table.index(ids[2])  # creation order
    assert "showing" not in result.stdout


def test_group_json_is_the_apis_shape(book: RedisBook) -> None:
    ids = group_of(book, "g", 3, seal=False)
    finish(book, ids[2])
    body = json.loads(run(book, "group", "g", "--json").stdout)
    assert body["groupId"] == "g"
    assert "total" not in body  # not declared
    assert (body["members"], body["ended"]) == (3, False)
    assert body["counts"]["succeeded"] == 1
    assert body["progress"] == 33.33
    assert [task["id"] for task in body["tasks"]] == ids
    assert all("history" not in task for task in body["tasks"])
    limited = json.loads(run(book, "group", "g", "--json", "--limit", "2").stdout)
    assert [task["id"] for task in limited["tasks"]] == ids[:2]
    assert limited["members"] == 3


def test_group_limit_says_what_is_left_out(book: RedisBook) -> None:
    ids = group_of(book, "wide", 4)
    result = run(book, "group", "wide", "--limit", "2")
    assert result.exit_code == 0, result.output
    assert ids[1] in result.stdout
    assert ids[2] not in result.stdout
    assert "showing 2 of 4 members" in result.stdout


def test_group_ids_are_printed_as_text_not_markup(book: RedisBook) -> None:
    (task_id,) = group_of(book, "[/bold] [red]x", 1)
    result = run(book, "group", "[/bold] [red]x")
    assert result.exit_code == 0, result.output
    assert "group [/bold] [red]x:" in result.stdout
    assert task_id in result.stdout


def test_group_unknown_is_exit_1_and_bad_input_exit_2(book: RedisBook) -> None:
    missing = run(book, "group", "nope")
    assert missing.exit_code == 1
    assert "no group 'nope'" in missing.stderr
    assert run(book, "group", "nope", "--json").exit_code == 1
    for args in (["group"], ["group", "g", "--limit", "0"], ["group", "g", "--limit", "1001"]):
        assert run(book, *args).exit_code == 2, args
    blank = run(book, "group", " ")
    assert blank.exit_code == 2
    assert "groupId" in blank.stderr or "empty" in blank.stderr


def test_sweep_expires_overdue_tasks(book: RedisBook) -> None:
    book.create(id="late", now_ms=0, ttl_ms=1, max_attempts=1)
    book.create(id="fine", now_ms=time.time() * 1000, ttl_ms=3_600_000, max_attempts=1)
    report = json.loads(run(book, "sweep", "--json").stdout)
    assert report["expired"] == 1
    late = book.get("late")
    fine = book.get("fine")
    assert late is not None
    assert fine is not None
    assert late.state == "expired"
    assert fine.state == "queued"
    assert run(book, "sweep").stdout.startswith("expired 0 task(s)")


def test_notifications_drain_and_consume(book: RedisBook) -> None:
    finish(book, "n1")
    consumed = json.loads(
        run(book, "notifications", "consume", "--group", "g", "--consumer", "c", "--json").stdout
    )
    assert [(n["taskId"], n["state"]) for n in consumed] == [("n1", "succeeded")]
    assert consumed[0]["id"]
    again = run(book, "notifications", "consume", "--group", "g", "--json")
    assert json.loads(again.stdout) == []  # acknowledged: not handed out again
    drained = json.loads(run(book, "notifications", "drain", "--json").stdout)
    assert [n["taskId"] for n in drained] == ["n1"]
    assert json.loads(run(book, "notifications", "drain", "--json").stdout) == []


def test_consume_without_ack_hands_them_out_again(book: RedisBook) -> None:
    finish(book, "n2")
    args = ["notifications", "consume", "--group", "g", "--no-ack", "--json"]
    first = json.loads(run(book, *args, "--consumer", "a").stdout)
    assert len(first) == 1
    idle = ["notifications", "consume", "--group", "g", "--consumer", "b"]
    # min idle is a minute: another consumer does not get them yet
    assert run(book, *idle).stdout == ""


def test_watch_json_lines_until_terminal(book: RedisBook) -> None:
    book.create(id="w", now_ms=NOW, ttl_ms=10_000_000, max_attempts=1)
    threading.Timer(0.3, finish, args=(book, "w", 5, 0.02)).start()
    result = run(book, "watch", "w", "--json")
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    versions = versions_seen(lines)
    assert versions == list(range(1, 8))
    assert lines[-1] == {"event": "end", "id": None, "data": {"state": "succeeded", "version": 7}}


def versions_seen(lines: list[dict[str, Any]]) -> list[int]:
    """Every version a watcher was shown: change ids, and a snapshot's history."""
    seen: list[int] = []
    for line in lines:
        if line["event"] == "change":
            seen.append(line["id"])
        elif line["event"] == "snapshot":
            seen.extend(e["version"] for e in line["data"]["history"] if e["version"] not in seen)
    return seen


def test_watch_progress_bar(book: RedisBook) -> None:
    finish(book, "done")
    result = run(book, "watch", "done")
    assert result.exit_code == 0
    assert "100%" in result.stdout
    assert "done: succeeded at v5" in result.stdout
    assert run(book, "watch", "nope").exit_code == 1


def test_watch_resumes_across_a_dropped_connection(book: RedisBook) -> None:
    name = f"watch-{uuid.uuid4().hex[:8]}"
    url = f"{CLI_REDIS_URL}?client_name={name}"
    admin = redis.Redis.from_url(CLI_REDIS_URL)
    book.create(id="d", now_ms=NOW, ttl_ms=10_000_000, max_attempts=1)
    killed: list[int] = []

    def subscribed_client() -> int | None:
        for info in admin.client_list(_type="pubsub"):
            if info.get("name") == name:
                return int(info["id"])
        return None

    def drive() -> None:
        deadline = time.monotonic() + 10
        while subscribed_client() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        book.apply("d", StartEvent(at_ms=NOW + 1, worker="w"))
        book.apply("d", ProgressEvent(at_ms=NOW + 2, progress=10, cursor="c"))
        time.sleep(0.2)
        client_id = subscribed_client()
        if client_id is not None:
            killed.append(admin.client_kill_filter(_id=str(client_id)))
        # Changes while the watcher is away: it must resume, not skip them.
        for p in (20, 30, 40):
            book.apply("d", ProgressEvent(at_ms=NOW + p, progress=p, cursor="c"))
        time.sleep(0.3)
        book.apply("d", ProgressEvent(at_ms=NOW + 90, progress=90, cursor="c"))
        book.apply("d", SucceedEvent(at_ms=NOW + 100, result_ref="r", result_hash="h"))

    driver = threading.Thread(target=drive)
    driver.start()
    result = run(book, "watch", "d", "--json", url=url)
    driver.join()
    admin.close()
    assert killed == [1]
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert versions_seen(lines) == list(range(1, 8))
    assert lines[-1]["event"] == "end"


def test_demo_runs_the_projects_demo(book: RedisBook, monkeypatch: pytest.MonkeyPatch) -> None:
    demo = importlib.import_module("asyncbook.cli._demo")
    calls: list[list[str]] = []
    monkeypatch.setattr(demo, "main", calls.append)
    assert run(book, "demo").exit_code == 0
    assert run(book, "demo", "--serve").exit_code == 0
    assert calls == [[], ["--serve"]]


@pytest.mark.long
def test_watch_through_the_server_resumes_after_it_restarts(book: RedisBook) -> None:
    """``watch --api``: the server goes away mid-task and comes back on the same port."""
    port = free_port()
    book.create(id="via/api", now_ms=NOW, ttl_ms=10_000_000, max_attempts=1)
    first = BackgroundServer(book, feed_for(book), port=port)
    first.start()
    servers = [first]

    def wait_for_watcher(server: BackgroundServer) -> None:
        deadline = time.monotonic() + 10
        while server.app.state.hub.watcher_count == 0 and time.monotonic() < deadline:
            time.sleep(0.01)

    def drive() -> None:
        wait_for_watcher(first)
        book.apply("via/api", StartEvent(at_ms=NOW + 1, worker="w"))
        book.apply("via/api", ProgressEvent(at_ms=NOW + 10, progress=10, cursor="c"))
        time.sleep(0.3)
        first.stop()  # the stream is cut; the watcher retries against a closed port
        for p in (20, 30, 40):
            book.apply("via/api", ProgressEvent(at_ms=NOW + p, progress=p, cursor="c"))
        second = BackgroundServer(book, feed_for(book), port=port)
        second.start()
        servers.append(second)
        wait_for_watcher(second)
        book.apply("via/api", ProgressEvent(at_ms=NOW + 90, progress=90, cursor="c"))
        book.apply("via/api", SucceedEvent(at_ms=NOW + 99, result_ref="r", result_hash="h"))

    driver = threading.Thread(target=drive)
    driver.start()
    try:
        result = run(book, "watch", "via/api", "--api", f"http://127.0.0.1:{port}", "--json")
    finally:
        driver.join()
        for server in servers:
            server.stop()
    assert result.exit_code == 0, result.output
    assert "reconnecting" in result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert versions_seen(lines) == list(range(1, 8))
    assert lines[-1] == {"event": "end", "id": None, "data": {"state": "succeeded", "version": 7}}


def test_watch_through_the_server_unknown_task_and_bad_token(book: RedisBook) -> None:
    with BackgroundServer(book, feed_for(book), token="t0ken-t0ken-t0ken") as server:
        missing = run(book, "watch", "nope", "--api", server.url, "--token", "t0ken-t0ken-t0ken")
        assert missing.exit_code == 1
        assert "no task 'nope'" in missing.stderr
        refused = run(book, "watch", "nope", "--api", server.url, "--token", "wrong")
        assert refused.exit_code == 2
        assert "401" in refused.stderr
