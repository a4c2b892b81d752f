"""Who may do what: the read and operator tokens, the sign-in cookie's role, a trusted
proxy's header (and a spoofed one), and the audit of every cancel through the API."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator

import httpx
import itsdangerous
import pytest

from asyncbook import AsyncBookError, MemoryBook
from asyncbook.web import AccessRules, BackgroundServer
from asyncbook.web._auth import COOKIE, session_secret

from ..support.web_server import Running, assert_error, running_server

OPERATOR = "operator-token-0123456789"
READER = "reader-token-0123456789ab"
HOUR_MS = 3_600_000
USER = "x-forwarded-user"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def live(server: Running, task_id: str) -> None:
    server.book.create(id=task_id, now_ms=server.book.now_ms(), ttl_ms=HOUR_MS, max_attempts=1)


def state_of(server: Running, task_id: str) -> str:
    task = server.book.get(task_id)
    assert task is not None
    return task.state.value


@pytest.fixture
def server() -> Iterator[Running]:
    """A server with both tokens."""
    with running_server(access=AccessRules.of(token=OPERATOR, read_token=READER)) as running:
        yield running


def test_the_read_token_reads_everything(server: Running, client: httpx.Client) -> None:
    live(server, "r/1")
    server.book.cancel("r/1", "seen", actor="cli:ann")
    live(server, "r/2")
    headers = bearer(READER)
    for path in (
        "/",
        "/task?id=r%2F1",
        "/workers",
        "/api/tasks",
        "/api/tasks/r%2F1",
        "/api/tasks/r%2F1/events",
        "/api/search?q=r",
        "/api/tasks/r%2F1/audit",
        "/api/audit",
        "/metrics",
        "/openapi.json",
    ):
        assert client.get(path, headers=headers).status_code == 200, path
    with client.stream("GET", "/api/tasks/r%2F2/stream", headers=headers) as stream:
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
    assert client.get("/api/tasks/r%2F1/audit", headers=headers).json()["entries"][0]["actor"] == (
        "cli:ann"
    )
    assert 'data-role="read"' in client.get("/task?id=r%2F2", headers=headers).text


def test_the_read_token_is_refused_every_change(server: Running, client: httpx.Client) -> None:
    live(server, "r/1")
    refused = client.post("/api/tasks/r%2F1/cancel", json={"reason": "x"}, headers=bearer(READER))
    body = assert_error(refused, 403, "forbidden")
    assert body["role"] == "operator"
    assert "operator role" in body["message"]
    delivery = client.post(
        "/api/tasks/r%2F1/delivery", headers={**bearer(READER), "Idempotency-Key": "k"}
    )
    assert_error(delivery, 403, "forbidden")
    assert state_of(server, "r/1") == "queued"  # nothing written
    assert server.book.audit() == []


def test_the_operator_token_cancels_and_the_cancel_is_audited(
    server: Running, client: httpx.Client
) -> None:
    live(server, "o/1")
    answer = client.post(
        "/api/tasks/o%2F1/cancel", json={"reason": "customer withdrew"}, headers=bearer(OPERATOR)
    )
    assert answer.status_code == 200, answer.text
    assert state_of(server, "o/1") == "cancelled"
    entries = client.get("/api/tasks/o%2F1/audit", headers=bearer(READER)).json()["entries"]
    assert len(entries) == 1
    entry = entries[0]
    assert (entry["actor"], entry["action"], entry["taskId"]) == ("token:operator", "cancel", "o/1")
    assert (entry["reason"], entry["outcome"]) == ("customer withdrew", "cancelled")
    assert abs(entry["atMs"] - server.book.now_ms()) < 60_000
    everything = client.get("/api/audit", params={"since": "1h"}, headers=bearer(READER)).json()
    assert everything["entries"] == entries
    later = client.get("/api/audit", params={"since": "2999-01-01"}, headers=bearer(READER))
    assert later.json()["entries"] == []


def test_audit_reads_refuse_bad_input(server: Running, client: httpx.Client) -> None:
    headers = bearer(READER)
    for limit in ("0", "1001", "x"):
        answer = client.get("/api/audit", params={"limit": limit}, headers=headers)
        assert assert_error(answer, 400, "invalid-request")["field"] == "limit"
    bad_since = client.get("/api/tasks/x/audit", params={"since": "soon"}, headers=headers)
    assert assert_error(bad_since, 400, "invalid-request")["field"] == "since"
    assert client.get("/api/tasks/never/audit", headers=headers).json() == {"entries": []}


def sign_in(client: httpx.Client, token: str) -> None:
    assert client.post("/login", data={"token": token}).status_code == 303


@pytest.mark.parametrize(("token", "role"), [(READER, "read"), (OPERATOR, "operator")])
def test_signing_in_gives_the_page_the_token_s_role(
    server: Running, client: httpx.Client, token: str, role: str
) -> None:
    live(server, "s/1")
    sign_in(client, token)
    page = client.get("/task", params={"id": "s/1"})
    assert f'<body data-role="{role}">' in page.text
    assert '<p id="cancel-token-field">' in page.text  # a change needs the token itself
    assert client.get("/api/tasks/s%2F1").status_code == 200
    # The cookie never authorizes a change, whatever its role.
    assert_error(client.post("/api/tasks/s%2F1/cancel", json={}), 401, "unauthorized")
    assert state_of(server, "s/1") == "queued"


def test_the_tokens_are_checked_at_start() -> None:
    with pytest.raises(AsyncBookError) as same:
        AccessRules.of(token=OPERATOR, read_token=OPERATOR)
    assert same.value.field == "read_token"
    with pytest.raises(AsyncBookError) as short:
        AccessRules.of(token=OPERATOR, read_token="short")
    assert short.value.field == "read_token"
    assert "ASYNCBOOK_READ_TOKEN" in short.value.message


# -- a trusted proxy's header ----------------------------------------------------------------


def proxied(proxy: str, token: str | None = None) -> AccessRules:
    return AccessRules.of(
        token, trusted_header="X-Forwarded-User", trusted_proxies=[proxy], operators=["alice"]
    )


def test_a_header_from_the_trusted_proxy_names_the_user() -> None:
    with (
        running_server(access=proxied("127.0.0.0/8")) as server,
        httpx.Client(base_url=server.url, timeout=10) as client,
    ):
        live(server, "h/1")
        live(server, "h/2")
        assert_error(client.get("/api/tasks/h%2F1"), 401, "unauthorized")  # no header: nobody
        assert_error(client.get("/"), 401, "unauthorized")  # no tokens: no sign-in form
        bob = {USER: "bob"}
        assert client.get("/api/tasks/h%2F1", headers=bob).status_code == 200
        page = client.get("/task", params={"id": "h/1"}, headers=bob).text
        assert '<body data-role="read">' in page
        assert '<p id="cancel-token-field" hidden>' in page  # the proxy signs the user in
        refused = client.post("/api/tasks/h%2F1/cancel", json={}, headers=bob)
        assert assert_error(refused, 403, "forbidden")["role"] == "operator"
        alice = {USER: "alice"}
        done = client.post("/api/tasks/h%2F1/cancel", json={"reason": "dup"}, headers=alice)
        assert done.status_code == 200, done.text
        (entry,) = server.book.audit("h/1")
        assert (entry.actor, entry.reason, entry.outcome) == ("alice", "dup", "cancelled")
        cross = {**alice, "Sec-Fetch-Site": "cross-site"}
        assert_error(client.post("/api/tasks/h%2F2/cancel", headers=cross), 403, "cross-site")
        assert state_of(server, "h/2") == "queued"


def test_a_spoofed_header_from_another_address_gets_nothing() -> None:
    with (
        running_server(access=proxied("10.0.0.0/8", OPERATOR)) as server,
        httpx.Client(base_url=server.url, timeout=10) as client,
    ):
        live(server, "s/1")
        alice = {USER: "alice"}
        assert_error(client.get("/api/tasks/s%2F1", headers=alice), 401, "unauthorized")
        spoofed = client.post("/api/tasks/s%2F1/cancel", json={}, headers=alice)
        assert_error(spoofed, 401, "unauthorized")
        assert client.get("/", headers=alice).status_code == 303  # to the sign-in form
        assert state_of(server, "s/1") == "queued"
        assert server.book.audit() == []
        # With the token, the request is the token's, whatever the header says.
        done = client.post("/api/tasks/s%2F1/cancel", headers={**alice, **bearer(OPERATOR)})
        assert done.status_code == 200
        assert [e.actor for e in server.book.audit("s/1")] == ["token:operator"]


def test_a_trusted_header_needs_its_proxies() -> None:
    with pytest.raises(AsyncBookError) as missing:
        AccessRules.of(trusted_header="X-Forwarded-User")
    assert missing.value.field == "trusted_proxy"
    assert "--trusted-proxy" in missing.value.message
    with pytest.raises(AsyncBookError) as bad:
        AccessRules.of(trusted_header="X-Forwarded-User", trusted_proxies=["proxy.local"])
    assert bad.value.field == "trusted_proxy"
    with pytest.raises(AsyncBookError) as both:
        BackgroundServer(MemoryBook(), access=proxied("127.0.0.1"), proxy_headers=True)
    assert both.value.field == "trusted_header"


def test_a_trusted_header_lets_the_server_listen_beyond_loopback() -> None:
    BackgroundServer(MemoryBook(), host="0.0.0.0", access=proxied("10.0.0.5"))  # not started
    with pytest.raises(AsyncBookError):
        BackgroundServer(MemoryBook(), host="0.0.0.0")


def test_a_cancel_on_a_server_without_access_rules_is_anonymous() -> None:
    with (
        running_server() as server,
        httpx.Client(base_url=server.url, timeout=10) as client,
    ):
        live(server, "a/1")
        assert client.post("/api/tasks/a%2F1/cancel", json={"reason": "r"}).status_code == 200
        assert [(e.actor, e.reason) for e in server.book.audit("a/1")] == [("anonymous", "r")]


def test_a_session_signed_in_before_sessions_were_kept_signs_in_again(server: Running) -> None:
    """A cookie of an old shape (``{"signedIn": true}``, no session id the server keeps)
    could never be signed out: it is no session, even with a valid signature."""
    signer = itsdangerous.TimestampSigner(session_secret(OPERATOR))
    for shape in ({"signedIn": True}, {"signedIn": True, "role": "operator"}):
        old = signer.sign(base64.b64encode(json.dumps(shape).encode())).decode()
        with running_server(token=OPERATOR) as only_token:
            live(only_token, "o/1")
            cookies = {COOKIE: old}
            with httpx.Client(base_url=only_token.url, timeout=10, cookies=cookies) as client:
                assert client.get("/task", params={"id": "o/1"}).status_code == 303
                assert client.get("/api/tasks/o%2F1").status_code == 401
    # With a read token too the key changes: every session signs in again.
    with httpx.Client(base_url=server.url, timeout=10, cookies={COOKIE: old}) as client:
        assert client.get("/").status_code == 303
