"""The page's sign-in: a signed session cookie, sign-out, ``next``, throttling, Secure."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import redis
from click.testing import CliRunner

from asyncbook import AsyncBookError, MemoryBook, RedisBook
from asyncbook.cli import cli
from asyncbook.web import AccessRules, BackgroundServer, create_app
from asyncbook.web._auth import COOKIE, MIN_TOKEN_LENGTH, token_matches
from asyncbook.web._login import safe_next

from ..support.books import delete_namespace
from ..support.web_server import WEB_REDIS_URL

TOKEN = "sign-in-token-0123456789"
BASE64_TOKEN = "q1Z+/w8xR0lGODlhAQABAIAAAP///wAAACw=="


def book() -> MemoryBook:
    memory = MemoryBook()
    memory.create(id="a/b", now_ms=0, ttl_ms=10**12, max_attempts=1)
    return memory


@pytest.fixture
def server() -> Iterator[BackgroundServer]:
    with BackgroundServer(book(), token=TOKEN) as running:
        yield running


def client_of(server: BackgroundServer) -> httpx.Client:
    return httpx.Client(base_url=server.url.rstrip("/"), timeout=10)


def sign_in(client: httpx.Client, token: str = TOKEN, **form: str) -> httpx.Response:
    return client.post("/login", data={"token": token, **form})


def test_a_base64_token_signs_in(server: BackgroundServer) -> None:
    with BackgroundServer(book(), token=BASE64_TOKEN) as other, client_of(other) as client:
        assert sign_in(client, BASE64_TOKEN).status_code == 303
        assert client.get("/").status_code == 200
        assert client.get("/api/tasks/a%2Fb").json()["id"] == "a/b"


def test_the_cookie_is_signed_and_never_holds_the_token(server: BackgroundServer) -> None:
    with client_of(server) as client:
        response = sign_in(client)
        cookie = response.headers["set-cookie"]
        assert cookie.startswith(COOKIE + "=")
        assert TOKEN not in cookie
        assert "httponly" in cookie.lower()
        assert "samesite=lax" in cookie.lower()
        assert "secure" not in cookie.lower()  # plain http on loopback
        value = client.cookies[COOKIE]
        assert client.get("/").status_code == 200
        client.cookies.set(COOKIE, value[:-2] + ("AA" if value[-2:] != "AA" else "BB"))
        assert client.get("/").status_code == 303  # a forged signature is no session


@pytest.fixture
def redis_book() -> Iterator[RedisBook]:
    """A RedisBook on a fresh namespace of the web test Redis (its sessions kept there)."""
    client = redis.Redis.from_url(WEB_REDIS_URL)
    namespace = f"web-signin-{uuid.uuid4().hex[:8]}"
    try:
        yield RedisBook(client, namespace=namespace)
    finally:
        delete_namespace(client, namespace)
        client.close()


def test_a_session_survives_a_restart_and_ends_with_a_new_token(redis_book: RedisBook) -> None:
    with BackgroundServer(redis_book, token=TOKEN) as first, client_of(first) as client:
        sign_in(client)
        value = client.cookies[COOKIE]
    with BackgroundServer(redis_book, token=TOKEN) as second, client_of(second) as client:
        client.cookies.set(COOKIE, value)
        assert client.get("/api/tasks").status_code == 200
    with BackgroundServer(redis_book, token=TOKEN + "-new") as third, client_of(third) as client:
        client.cookies.set(COOKIE, value)
        assert client.get("/api/tasks").status_code == 401


def test_a_sign_out_holds_across_a_restart(redis_book: RedisBook) -> None:
    with BackgroundServer(redis_book, token=TOKEN) as first, client_of(first) as client:
        sign_in(client)
        value = client.cookies[COOKIE]
        client.post("/logout")
    with BackgroundServer(redis_book, token=TOKEN) as second, client_of(second) as client:
        client.cookies.set(COOKIE, value)
        assert client.get("/api/tasks").status_code == 401


def test_sign_out_ends_the_session(server: BackgroundServer) -> None:
    with client_of(server) as client:
        sign_in(client)
        assert client.get("/").status_code == 200
        assert 'id="signout" method="post"' in client.get("/").text
        response = client.post("/logout")
        assert response.status_code == 303
        assert response.headers["location"] == "/login"
        assert COOKIE not in client.cookies
        assert client.get("/").status_code == 303


def test_sign_in_returns_to_the_page_asked_for(server: BackgroundServer) -> None:
    with client_of(server) as client:
        asked = client.get("/task?id=a%2Fb")
        assert asked.status_code == 303
        location = urlsplit(asked.headers["location"])
        assert location.path == "/login"
        (next_page,) = parse_qs(location.query)["next"]
        assert next_page == "/task?id=a%2Fb"
        form = client.get(asked.headers["location"]).text
        assert 'name="next" value="/task?id=a%2Fb"' in form
        signed_in = sign_in(client, next=next_page)
        assert signed_in.status_code == 303
        assert signed_in.headers["location"] == "/task?id=a%2Fb"


@pytest.mark.parametrize(
    "next_page",
    [
        "//evil.example/x",
        "https://evil.example/",
        "/\\evil.example",
        "/\t/evil.example",
        "javascript:alert(1)",
        "evil.example",
        "",
        "http:/evil.example",
        "/\x00",
    ],
)
def test_next_never_leaves_the_site(server: BackgroundServer, next_page: str) -> None:
    assert safe_next(next_page) == "/"
    with client_of(server) as client:
        assert sign_in(client, next=next_page).headers["location"] == "/"
        form = client.get("/login", params={"next": next_page}).text
        assert 'name="next" value="/"' in form


def test_next_keeps_a_path_on_the_site() -> None:
    assert safe_next("/task?id=%2E%2E") == "/task?id=%2E%2E"
    assert safe_next("/?state=running") == "/?state=running"
    assert safe_next(None) == "/"


@pytest.mark.parametrize(
    "body",
    [b"&".join([b"a=1"] * 40), b"token=%FF%FE", b"\xff\xfe=\x00", b"token", b"=&=&="],
)
def test_a_malformed_sign_in_form_is_a_client_error(server: BackgroundServer, body: bytes) -> None:
    with client_of(server) as client:
        response = client.post("/login", content=body)
    assert 400 <= response.status_code < 500, response.text
    if response.status_code == 400:
        assert response.json()["field"] == "body"


def test_the_next_parameter_is_escaped_in_the_form(server: BackgroundServer) -> None:
    with client_of(server) as client:
        form = client.get("/login", params={"next": '/"><script>x</script>'}).text
    assert "<script>x" not in form
    assert 'value="/&quot;&gt;&lt;script&gt;x&lt;/script&gt;"' in form


def test_failed_sign_ins_are_limited_per_address(server: BackgroundServer) -> None:
    with client_of(server) as client:
        for _ in range(10):
            assert sign_in(client, "wrong-token-0123456789").status_code == 401
        refused = sign_in(client, "wrong-token-0123456789")
        assert refused.status_code == 429
        assert 1 <= int(refused.headers["retry-after"]) <= 60
        assert sign_in(client).status_code == 303  # the right token always gets in
        assert COOKIE in client.cookies
        bearer = {"Authorization": "Bearer " + TOKEN}
        assert client.get("/api/tasks", headers=bearer).status_code == 200


def test_wrong_bearer_tokens_are_limited_per_address_and_the_right_one_gets_in(
    server: BackgroundServer,
) -> None:
    wrong = {"Authorization": "Bearer wrong-token-0123456789"}
    with client_of(server) as client:
        for _ in range(10):
            assert client.get("/api/tasks", headers=wrong).status_code == 401
        refused = client.get("/api/tasks", headers=wrong)
        assert refused.status_code == 429
        assert refused.json()["code"] == "too-many-attempts"
        assert 1 <= int(refused.headers["retry-after"]) <= 60
        assert sign_in(client, "wrong-token-0123456789").status_code == 429  # one count
        right = {"Authorization": "Bearer " + TOKEN}
        assert client.get("/api/tasks", headers=right).status_code == 200
        assert sign_in(client).status_code == 303
        assert client.get("/api/tasks").status_code == 200


def copy_of(client: httpx.Client, server: BackgroundServer) -> httpx.Client:
    """Another client holding the same session cookie (a copied cookie)."""
    copy = client_of(server)
    copy.cookies.set(COOKIE, client.cookies[COOKIE])
    return copy


@pytest.mark.parametrize("kind", ["memory", "redis"])
def test_signing_out_ends_the_session_for_every_copy_of_the_cookie(
    kind: str, redis_book: RedisBook
) -> None:
    store = book() if kind == "memory" else redis_book
    with BackgroundServer(store, token=TOKEN) as running, client_of(running) as client:
        assert sign_in(client).status_code == 303
        with copy_of(client, running) as copy:
            assert copy.get("/api/tasks").status_code == 200
            assert client.post("/logout").status_code == 303
            assert copy.get("/api/tasks").status_code == 401
            assert copy.get("/").status_code == 303  # back to the sign-in form
        assert sign_in(client).status_code == 303  # a new session reads again
        assert client.get("/api/tasks").status_code == 200
        with copy_of(client, running) as copy:
            sign_in(client)  # signing in again ends the session it replaces
            assert copy.get("/api/tasks").status_code == 401
            assert client.get("/api/tasks").status_code == 200


@pytest.mark.parametrize(
    "headers",
    [
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {"Origin": "http://[x"},  # no URL at all: refused, not a 500
    ],
)
def test_cross_site_forms_are_refused(server: BackgroundServer, headers: dict[str, str]) -> None:
    with client_of(server) as client:
        response = client.post("/login", data={"token": TOKEN}, headers=headers)
        assert response.status_code == 403
        assert response.json()["code"] == "cross-site"
        assert COOKIE not in client.cookies
        sign_in(client)
        assert client.post("/logout", headers=headers).status_code == 403
        assert client.get("/").status_code == 200  # still signed in
        same = {"Sec-Fetch-Site": "same-origin", "Origin": str(client.base_url)}
        assert client.post("/logout", headers=same).status_code == 303


def test_the_cookie_never_authorizes_a_change(server: BackgroundServer) -> None:
    with client_of(server) as client:
        sign_in(client)
        same = {"Sec-Fetch-Site": "same-origin", "Idempotency-Key": "k"}
        response = client.post("/api/tasks/a%2Fb/delivery", headers=same)
        assert response.status_code == 401
        assert response.json()["code"] == "unauthorized"
        cancel = client.post("/api/tasks/a%2Fb/cancel", headers=same, json={"reason": "x"})
        assert cancel.status_code == 401
        assert cancel.json()["code"] == "unauthorized"
        assert client.get("/api/tasks/a%2Fb").json()["state"] == "queued"


@pytest.mark.parametrize("token", ["short", "x" * (MIN_TOKEN_LENGTH - 1)])
def test_a_token_too_short_to_be_a_secret_is_refused(token: str) -> None:
    with pytest.raises(AsyncBookError, match="--token") as caught:
        create_app(MemoryBook(), token=token)
    assert caught.value.field == "token"
    with pytest.raises(AsyncBookError, match="ASYNCBOOK_API_TOKEN"):
        BackgroundServer(MemoryBook(), token=token)
    result = CliRunner().invoke(cli, ["--redis-url", WEB_REDIS_URL, "serve", "--token", token])
    assert result.exit_code == 2
    assert re.search(r"Invalid value for '?--token'?.*16 characters", result.stderr, re.S)
    create_app(MemoryBook(), token="x" * MIN_TOKEN_LENGTH)


@pytest.mark.parametrize(
    "token", ["ü" * MIN_TOKEN_LENGTH, "tøken-0123456789", "a token with spaces"]
)
def test_a_token_no_header_can_carry_alike_is_refused_at_start(token: str) -> None:
    with pytest.raises(AsyncBookError, match="ASYNCBOOK_API_TOKEN") as caught:
        create_app(MemoryBook(), token=token)
    assert caught.value.field == "token"
    with pytest.raises(AsyncBookError, match="ASYNCBOOK_READ_TOKEN") as read:
        create_app(MemoryBook(), access=AccessRules.of(read_token=token))
    assert read.value.field == "read_token"
    result = CliRunner().invoke(cli, ["--redis-url", WEB_REDIS_URL, "serve", "--token", token])
    assert result.exit_code == 2
    assert "visible ASCII" in result.stderr


def test_a_header_is_compared_as_utf_8_bytes() -> None:
    token = "ü" * MIN_TOKEN_LENGTH
    assert token_matches(token.encode("utf-8"), token)
    assert not token_matches(token.encode("latin-1"), token)
    assert token_matches(TOKEN.encode(), TOKEN)
