"""DNS rebinding: the server answers only for loopback names and the names it is given."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

import asyncbook.web
from asyncbook import AsyncBookError, MemoryBook
from asyncbook.cli import cli
from asyncbook.web import BackgroundServer, create_app

from ..support.web_server import WEB_REDIS_URL

ALLOWED = ["status.example.com", "*.corp.example", "10.1.2.3", "fd00::7"]


@pytest.fixture(scope="module")
def server() -> Iterator[BackgroundServer]:
    book = MemoryBook()
    book.create(id="t", now_ms=0, ttl_ms=10**12, max_attempts=1)
    with BackgroundServer(book, allowed_hosts=ALLOWED) as running:
        yield running


def get(server: BackgroundServer, path: str, host: str | None) -> httpx.Response:
    headers = {} if host is None else {"Host": host}
    return httpx.get(server.url.rstrip("/") + path, headers=headers, timeout=10)


@pytest.mark.parametrize(
    "host",
    [
        "evil.example",
        "evil.example:5566",
        "127.0.0.1.evil.example",
        "localhost.evil.example",
        "example.com",
        "corp.example",
        "10.1.2.4",
        "[::2]",
        "",
        "a b",
    ],
)
def test_a_foreign_host_name_is_refused_in_json(server: BackgroundServer, host: str) -> None:
    for path in ("/api/tasks", "/api/tasks/t", "/", "/metrics", "/static/app.css"):
        response = get(server, path, host)
        assert response.status_code == 400, (path, response.text)
        body = response.json()
        assert body["code"] == "host-not-allowed"
        assert "--allowed-host" in body["message"]
        assert "tasks" not in response.text


def test_a_server_without_a_token_is_unreadable_through_a_rebound_name() -> None:
    """A page on evil.example whose name now resolves to 127.0.0.1 reads nothing."""
    book = MemoryBook()
    book.create(id="secret", now_ms=0, ttl_ms=10**12, max_attempts=1)
    with BackgroundServer(book) as server:
        for path in ("/api/tasks", "/api/tasks/secret", "/api/changes", "/openapi.json"):
            response = get(server, path, "evil.example:" + server.url.rsplit(":", 1)[1])
            assert response.status_code == 400, path
            assert "secret" not in response.text
        assert get(server, "/api/tasks/secret", "localhost").json()["id"] == "secret"


@pytest.mark.parametrize(
    "host",
    [
        None,  # httpx sends the URL's: 127.0.0.1:port
        "127.0.0.1",
        "localhost",
        "LOCALHOST:80",
        "[::1]:5566",
        "status.example.com",
        "Status.Example.Com:443",
        "a.corp.example",
        "b.a.corp.example:8080",
        "10.1.2.3:5566",
        "[fd00::7]:5566",
    ],
)
def test_loopback_and_allowed_names_are_answered(
    server: BackgroundServer, host: str | None
) -> None:
    response = get(server, "/api/tasks/t", host)
    assert response.status_code == 200, response.text
    assert response.json()["id"] == "t"


@pytest.mark.parametrize("name", ["status.example.com:80", "http://x", "a/b", "*", "a.*.b", ""])
def test_create_app_refuses_a_malformed_allowed_host(name: str) -> None:
    if name == "*":
        create_app(MemoryBook(), allowed_hosts=[name])  # every name: the operator's choice
        return
    with pytest.raises(AsyncBookError, match="--allowed-host") as caught:
        create_app(MemoryBook(), allowed_hosts=[name])
    assert caught.value.field == "allowedHosts"


def test_a_server_bound_to_one_address_answers_for_it() -> None:
    app = create_app(MemoryBook())
    assert app.state.allowed_hosts == ["localhost", "127.0.0.1", "[::1]"]
    with BackgroundServer(MemoryBook(), host="127.0.0.2") as server:
        assert server.url.startswith("http://127.0.0.2:")
        assert "127.0.0.2" in server.app.state.allowed_hosts
        assert httpx.get(server.url + "api/tasks", timeout=10).status_code == 200


def serve_options(monkeypatch: pytest.MonkeyPatch, *args: str, **env: str) -> dict[str, Any]:
    """The keyword arguments ``asyncbook serve ARGS`` passes to ``asyncbook.web.serve``."""
    seen: dict[str, Any] = {}

    def fake_serve(book: Any, feed: Any, **options: Any) -> None:
        seen.update(options)

    monkeypatch.setattr(asyncbook.web, "serve", fake_serve)
    result = CliRunner().invoke(cli, ["--redis-url", WEB_REDIS_URL, "serve", *args], env=env)
    assert result.exit_code == 0, result.output
    return seen


def test_serve_passes_allowed_hosts_from_options_and_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    given = serve_options(monkeypatch, "--allowed-host", "a.example", "--allowed-host", "b.example")
    assert given["allowed_hosts"] == ["a.example", "b.example"]
    env = serve_options(monkeypatch, ASYNCBOOK_ALLOWED_HOSTS="c.example, d.example,,e.example")
    assert env["allowed_hosts"] == ["c.example", "d.example", "e.example"]
    assert serve_options(monkeypatch)["allowed_hosts"] == []


def test_serve_names_the_option_of_a_malformed_allowed_host() -> None:
    result = CliRunner().invoke(
        cli, ["--redis-url", WEB_REDIS_URL, "serve", "--allowed-host", "x.example:80"]
    )
    assert result.exit_code == 2
    assert "--allowed-host" in result.output
