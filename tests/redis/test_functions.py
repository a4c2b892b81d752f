"""The book's scripts as one Redis Functions library (issue 32): loaded once per server,
called by FCALL / FCALL_RO; a flushed or restarted server, one without functions and one
under maxmemory lose nothing and answer as with EVALSHA."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

from asyncbook import CreateSpec, ProgressEvent, RedisBook, StartEvent, SucceedEvent
from asyncbook.redis._driver import Functions
from asyncbook.redis._scripts import READING_SCRIPTS, SCRIPT_ARGS, _lua, library

from ..support.servers import free_port, redis_server, wait_until
from ..support.valkey import SERVERS, require_valkey, valkey_server

HELPERS = ("_task.lua", "_info.lua", "_apply.lua", "_create.lua")


def calls(client: redis.Redis) -> dict[str, tuple[int, int]]:
    """Each script command's (calls, rejected calls) since the last CONFIG RESETSTAT."""
    stats = client.info("commandstats")
    names = ("fcall", "fcall_ro", "evalsha", "eval", "function|load")
    return {
        name: (stats[f"cmdstat_{name}"]["calls"], stats[f"cmdstat_{name}"]["rejected_calls"])
        for name in names
        if f"cmdstat_{name}" in stats
    }


def life(book: RedisBook, task_id: str) -> None:
    """create, start, succeed and get, each answered as the book answers."""
    book.create(id=task_id, now_ms=0, ttl_ms=60_000, max_attempts=1)
    assert book.apply(task_id, StartEvent(at_ms=1, worker="w"), f"{task_id}:s").reason == "started"
    done = SucceedEvent(at_ms=2, result_ref="r", result_hash="h")
    assert book.apply(task_id, done, f"{task_id}:d").reason == "succeeded"
    task = book.get(task_id)
    assert task is not None
    assert task.state == "succeeded"


@contextmanager
def private_server(folder: Path, *args: str, program: str = "redis-server") -> Iterator[int]:
    port = free_port()
    with redis_server(folder, "--port", str(port), *args, program=program):
        client = redis.Redis(port=port)
        wait_until(client.ping, what=program)
        client.close()
        yield port


def test_the_library_has_one_function_per_script_named_by_its_source() -> None:
    name, source = library("")
    assert re.fullmatch(r"asyncbook_[0-9a-f]{12}", name)
    assert source.startswith(f"#!lua name={name}\n")
    found = re.findall(r"function_name='([^']+)', flags=\{([^}]*)\}", source)
    assert [function for function, _ in found] == [f"{name}_{script}" for script in SCRIPT_ARGS]
    for (_, flags), script in zip(found, SCRIPT_ARGS, strict=True):
        assert flags == ("'no-writes'" if script in READING_SCRIPTS else ""), script


def test_the_library_resets_each_table_its_helpers_fill() -> None:
    """A library's locals live from call to call: a helper's table that a call fills
    (``NAME[...] = ...``) is made again at the start of each function."""
    reset = re.search(
        r"callback=function\(k, a\) KEYS, ARGV(?:, ([\w, ]+))? = k, a", library("")[1]
    )
    assert reset is not None
    tables = set()
    for helper in HELPERS:
        text = _lua(helper)
        for table in re.findall(r"^local (\w+) = \{", text, re.M):
            if re.search(rf"\b{table}\[[^\]]+\]\s*=[^=]", text) or re.search(
                rf"table\.insert\({table}\b", text
            ):
                tables.add(table)
    assert tables == {name.strip() for name in (reset.group(1) or "").split(",") if name.strip()}


def test_lives_go_by_fcall_once_the_library_is_loaded(tmp_path: Path) -> None:
    with private_server(tmp_path) as port:
        client = redis.Redis(port=port)
        book = RedisBook(client, namespace="fn")
        life(book, "a")  # the first call: "Function not found", FUNCTION LOAD, EVAL
        listed = client.function_list(library("")[0])
        assert len(listed) == 1
        entry = dict(zip(listed[0][::2], listed[0][1::2], strict=True))
        assert len(entry[b"functions"]) == len(SCRIPT_ARGS)
        assert calls(client)["function|load"] == (1, 0)
        client.config_resetstat()
        life(book, "b")
        life(RedisBook(redis.Redis(port=port), namespace="fn2"), "c")  # another client
        stats = calls(client)  # the new book's shard count check is a small EVAL
        assert (stats["fcall"], stats["fcall_ro"], "evalsha" in stats) == ((6, 0), (2, 0), False)
        client.config_resetstat()  # calls sent together: a pipeline, a transaction
        book.create_many([CreateSpec(f"m{n}", 0, 60_000, 1) for n in range(3)])
        started = book.apply_many(
            [(f"m{n}", StartEvent(at_ms=1, worker="w"), None) for n in range(3)]
        )
        assert [getattr(result, "reason", result) for result in started] == ["started"] * 3
        assert set(calls(client)) == {"fcall"}
        client.close()


def test_a_function_flush_mid_run_loses_nothing(book: RedisBook, client: redis.Redis) -> None:
    book.create(id="a", now_ms=0, ttl_ms=100, max_attempts=1)
    client.function_flush()
    book.create(id="b", now_ms=0, ttl_ms=100, max_attempts=1)
    client.function_flush()
    assert book.apply("a", StartEvent(at_ms=1, worker="w")).reason == "started"
    client.function_flush()
    client.script_flush()
    assert book.apply("a", ProgressEvent(at_ms=2, progress=5, cursor="c")).reason == "progress"
    client.function_flush()
    assert [getattr(r, "reason", r) for r in book.expire_many(["b"])] == ["expired"]
    client.function_flush()
    task = book.get("a")
    assert task is not None
    assert [entry.event.type for entry in task.history] == ["start", "progress"]
    # Other tests' events libraries may share the server: the book's is one of them.
    assert library("")[0].encode() in [entry[1] for entry in client.function_list()]


@pytest.mark.parametrize(
    "rules",
    [
        "-fcall -fcall_ro -function",  # no functions at all
        "-function",  # FCALL allowed, the library refused
    ],
)
def test_a_client_without_functions_keeps_evalsha(tmp_path: Path, rules: str) -> None:
    with private_server(tmp_path) as port:
        admin = redis.Redis(port=port)
        admin.acl_setuser(
            "book", enabled=True, passwords=["+pw"], keys=["*"], channels=["*"],
            commands=["+@all", *rules.split()],
        )  # fmt: skip
        client = redis.Redis(port=port, username="book", password="pw")
        book = RedisBook(client, namespace="nofn")
        life(book, "a")
        assert not Functions.of(client).on
        admin.config_resetstat()
        life(book, "b")
        assert set(calls(admin)) == {"evalsha"}  # no FCALL tried again
        assert admin.function_list() == []
        admin.close()
        client.close()


def test_a_library_the_server_refuses_leaves_its_script_to_evalsha(
    book: RedisBook, client: redis.Redis
) -> None:
    """``...`` is a chunk's arguments in EVAL, and no function's: FUNCTION LOAD refuses
    that events script's library; it runs by EVALSHA, the book's own by FCALL still."""
    source = "local unused = ...\nlocal answers = apply_events(KEYS, ARGV, 2)\n"
    source += "return {ARGV[1], redis.call('HGET', KEYS[1], 'st') or '', answers}"
    script = book.events_script(source)
    book.create(id="t", now_ms=0, ttl_ms=60_000, max_attempts=1)
    start = StartEvent(at_ms=1, worker="w")
    assert book.apply_in_script("t", [(start, "s")], script, "unused", ["x"]).state == "running"
    assert script.function == b""
    assert Functions.of(client).on
    assert book.engine.scripts.get.function


def test_under_maxmemory_prune_and_creates_run_as_by_evalsha(tmp_path: Path) -> None:
    """A function without flags is refused under maxmemory even to delete; EVALSHA of a
    script without flags may run until its first write that would grow memory, so the
    call goes by EVALSHA: prune frees memory, as it did before functions."""
    with private_server(tmp_path) as port:
        client = redis.Redis(port=port)
        book = RedisBook(client, namespace="oom")
        book.create_many([CreateSpec(f"t{n}", 0, 60_000, 1) for n in range(20)])
        book.expire_many([f"t{n}" for n in range(10)])
        client.delete(*(book.keys.task(f"t{n}") for n in range(10)))  # as if past retention
        book.catch_up_index()
        book.create_many([CreateSpec("behind", 0, 60_000, 1)])  # its index change waits
        client.config_set("maxmemory", 1)
        try:
            assert book.prune() >= 10
            # The index's writes are refused: its reads go on, and say how far behind.
            assert book.catch_up_index().entries == 1
            assert client.zcard(book.keys.state_index("expired")) == 0
            created = book.create_many([CreateSpec("late", 0, 60_000, 1)])  # as by EVALSHA
            assert [type(task).__name__ for task in created] == ["AsyncTask"]
            assert book.get("t15") is not None  # a read: no-writes runs under maxmemory
        finally:
            client.config_set("maxmemory", 0)
        stats = calls(client)
        assert stats["fcall"][1] >= 1  # refused, then sent by EVALSHA
        assert Functions.of(client).on
        client.close()


@pytest.mark.parametrize("name", sorted(SERVERS))
def test_valkey_runs_the_library(tmp_path: Path, name: str) -> None:
    require_valkey(name)
    with valkey_server(name, tmp_path) as port:
        client = redis.Redis(port=port)
        book = RedisBook(client, namespace="valkey")
        life(book, "a")
        client.function_flush()
        life(book, "b")
        client.config_resetstat()
        life(book, "c")
        assert set(calls(client)) == {"fcall", "fcall_ro"}
        client.close()


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        (redis.ResponseError("Function not found"), "missing"),
        (redis.ResponseError("unknown command 'FCALL', with args beginning with: "), "unsupported"),
        (redis.ResponseError("User u has no permissions to run the 'fcall' command"),
         "unsupported"),
        (redis.ResponseError("User u has no permissions to run the 'function|load' command"),
         "unsupported"),
        (redis.ResponseError("command not allowed when used memory > 'maxmemory'."), "maxmemory"),
        (redis.ResponseError("Library 'asyncbook_1' already exists"), "exists"),
        # Raised inside a running function: it ran, so it is not sent again.
        (redis.ResponseError("User u has no permissions to run the 'hset' command"), ""),
        (redis.ResponseError("ERR Error running script: boom"), ""),
        ("Function not found", ""),  # not an error reply
    ],
)  # fmt: skip
def test_what_a_refused_call_says_is_read_in_one_place(reply: object, said: str) -> None:
    assert Functions.refusal(reply) == said
