"""The book checks its server once, at first write: scripting, and the tested versions
(Redis 7.0+, Valkey 8.1+); the Valkey servers of the matrix run the book."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.exceptions import ResponseError

from asyncbook import RedisBook, UnsupportedServerError
from asyncbook.redis._server import require_supported, server_info

from ..support.books import delete_namespace, redis_client
from ..support.valkey import SERVERS, require_valkey, valkey_server

NO_LUA = ResponseError("Could not find scripting engine 'lua'")
"""What Valkey 9.1 answers EVAL with when its Lua engine is not loaded (seen below)."""


@pytest.mark.parametrize(
    ("info", "shown"),
    [
        ({"redis_version": "7.0.15"}, "redis 7.0.15"),
        ({"redis_version": "7.4.1", "server_name": "redis"}, "redis 7.4.1"),
        ({"redis_version": "7.2.4", "server_name": "valkey", "valkey_version": "8.1.8"},
         "valkey 8.1.8"),
        ({"redis_version": "7.2.4", "server_name": "valkey", "valkey_version": "9.1.2"},
         "valkey 9.1.2"),
    ],
)  # fmt: skip
def test_supported_servers_pass(info: dict[str, str], shown: str) -> None:
    server = server_info(info)
    assert str(server) == shown
    require_supported(server, None)


@pytest.mark.parametrize(
    ("info", "missing"),
    [
        ({"redis_version": "6.2.14"}, "it is older than redis 7.0"),
        ({"redis_version": "7.2.4", "server_name": "valkey", "valkey_version": "8.0.2"},
         "it is older than valkey 8.1"),
    ],
)  # fmt: skip
def test_an_old_server_is_refused_naming_the_version_wanted(
    info: dict[str, str], missing: str
) -> None:
    with pytest.raises(UnsupportedServerError) as caught:
        require_supported(server_info(info), None)
    assert caught.value.code == "unsupported-server"
    assert caught.value.missing == missing
    assert missing in caught.value.message


@pytest.mark.parametrize(
    "answer", [NO_LUA, ResponseError("unknown command 'eval', with args beginning with: ")]
)
def test_a_server_without_scripting_is_refused(answer: ResponseError) -> None:
    with pytest.raises(UnsupportedServerError, match="runs no Lua scripts") as caught:
        require_supported(server_info({"redis_version": "7.2.4"}), answer)
    assert str(answer) in caught.value.missing
    with pytest.raises(UnsupportedServerError, match="refused INFO"):
        require_supported(None, answer)


def test_an_unknown_version_or_another_script_error_is_not_refused() -> None:
    require_supported(None, None)  # INFO refused: an embedded server, a restricted user
    require_supported(server_info({"redis_version": "7.2.4"}), ResponseError("NOPERM"))


def test_the_error_survives_pickling() -> None:
    error = pickle.loads(pickle.dumps(UnsupportedServerError("redis 6.2.14", "too old")))
    assert (error.server, error.missing, error.code) == ("redis 6.2.14", "too old", error.code)


@pytest.mark.redis
def test_an_old_server_fails_the_first_write_and_nothing_is_written(namespace: str) -> None:
    client = redis_client()
    asked: list[str] = []

    def old_server(response: Any, **options: Any) -> dict[str, str]:
        asked.append("INFO")
        return {"redis_version": "6.2.14", "maxmemory_policy": "noeviction"}

    client.set_response_callback("INFO", old_server)
    book = RedisBook(client, namespace=namespace)
    for _ in range(2):  # not checked: checked again at the next write
        with pytest.raises(UnsupportedServerError, match=r"redis 6\.2\.14.*older than redis 7\.0"):
            book.create(id="t", now_ms=0, ttl_ms=10_000, max_attempts=1)
    assert list(client.scan_iter(match="{" + namespace + "}:*")) == []
    assert asked == ["INFO"] * 4  # INFO server and INFO memory, in one round trip each time
    client.close()


@pytest.mark.redis
def test_the_server_is_checked_once_per_book(namespace: str) -> None:
    client = redis_client()
    asked: list[str] = []
    callbacks: dict[str, Any] = dict(client.response_callbacks)
    real = callbacks.get("INFO")

    def counted(response: Any, **options: Any) -> Any:
        asked.append("INFO")
        return real(response, **options) if real else response

    client.set_response_callback("INFO", counted)
    book = RedisBook(client, namespace=namespace)
    for n in range(3):
        book.create(id=f"t{n}", now_ms=0, ttl_ms=10_000, max_attempts=1)
    book.apply("t0", {"type": "start", "atMs": 1, "worker": "w1"})
    assert asked == ["INFO", "INFO"]
    delete_namespace(client, namespace)
    client.close()


@pytest.mark.parametrize("name", sorted(SERVERS))
def test_each_valkey_of_the_matrix_runs_the_book(name: str, tmp_path: Path) -> None:
    require_valkey(name)
    with valkey_server(name, tmp_path) as port:
        client = redis.Redis(port=port)
        assert str(server_info(client.info("server"))).startswith(name.replace("-", " "))
        book = RedisBook(client, namespace="matrix")
        assert book.check_server() == "noeviction"
        book.create(id="t", now_ms=0, ttl_ms=10_000, max_attempts=1)
        book.apply("t", {"type": "start", "atMs": 1, "worker": "w1"})
        task = book.get("t")
        assert task is not None
        assert task.state == "running"
        client.close()


def test_valkey_without_its_lua_engine_is_refused_at_the_first_write(tmp_path: Path) -> None:
    require_valkey("valkey-9.1")
    with valkey_server("valkey-9.1", tmp_path, "--enable-module-command", "local") as port:
        client: Any = redis.Redis(port=port)
        client.execute_command("MODULE", "UNLOAD", "lua")
        book = RedisBook(client, namespace="no-lua")
        with pytest.raises(UnsupportedServerError) as caught:
            book.create(id="t", now_ms=0, ttl_ms=10_000, max_attempts=1)
        assert caught.value.server == "valkey 9.1.2"
        assert caught.value.missing == f"it runs no Lua scripts (EVAL answered {str(NO_LUA)!r})"
        client.close()
