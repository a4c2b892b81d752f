"""One unauthenticated request cannot exhaust the status server: bodies and heads are bounded."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from asyncbook.web._login import LOGIN_BODY_LIMIT
from asyncbook.web._server import MAX_HEAD_BYTES

from ..support.web_server import Running, assert_error, running_server

pytestmark = pytest.mark.redis

TOKEN = "limits-token-0123456789"
ANSWER_SECONDS = 5.0


@pytest.fixture(scope="module")
def server() -> Iterator[Running]:
    with running_server(token=TOKEN) as running:
        yield running


def port_of(server: Running) -> int:
    port = urlsplit(server.url).port
    assert port is not None
    return port


def exchange(port: int, *pieces: bytes) -> bytes:
    """Send ``pieces`` on one connection, then read until the server closes it.

    A server that stops reading and closes may reset the connection while the request is
    still being sent: that is an answer too (``b""`` when nothing else came back).
    """
    answer = b""
    with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_SECONDS) as sock:
        try:
            for piece in pieces:
                sock.sendall(piece)
            while chunk := sock.recv(65536):
                answer += chunk
        except (ConnectionResetError, BrokenPipeError):
            pass
    return answer


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0


def login_head(*headers: str) -> bytes:
    lines = ["POST /login HTTP/1.1", "Host: 127.0.0.1", *headers, "", ""]
    return "\r\n".join(lines).encode()


def test_a_login_body_declared_too_large_is_refused_before_it_is_read(server: Running) -> None:
    declared = 10 * 1024 * 1024
    head = login_head(
        "Content-Type: application/x-www-form-urlencoded", f"Content-Length: {declared}"
    )
    # Only the head and 1 KiB are sent: the answer must not wait for the other 10 MiB.
    answer = exchange(port_of(server), head + b"token=" + b"a" * 1024)
    assert status_of(answer) == 413, answer[:200]
    assert b'"code":"too-large"' in answer
    assert b"connection: close" in answer.lower()


def test_a_chunked_login_body_is_cut_off_at_the_limit(server: Running) -> None:
    head = login_head(
        "Content-Type: application/x-www-form-urlencoded", "Transfer-Encoding: chunked"
    )
    body = b"token=" + b"a" * LOGIN_BODY_LIMIT
    chunked = f"{len(body):x}\r\n".encode() + body + b"\r\n"
    # No last (empty) chunk: a server that reads to the end would never answer. Sent in
    # one write, so the server has read all of it when it answers (no reset races it).
    answer = exchange(port_of(server), head + chunked)
    assert status_of(answer) == 413, answer[:200]


def test_a_small_login_body_still_signs_in(server: Running) -> None:
    with httpx.Client(base_url=server.url, timeout=10) as client:
        response = client.post("/login", data={"token": TOKEN, "next": "/?" + "x" * 2000})
    assert response.status_code == 303


def test_an_oversized_request_head_is_refused_and_others_are_served(server: Running) -> None:
    big = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * (1024 * 1024)
    answer = exchange(port_of(server), big, b"\r\n\r\n")
    assert status_of(answer) in (0, 400, 431), answer[:200]
    started = time.monotonic()
    assert httpx.get(server.url + "/metrics", timeout=10).status_code == 200
    assert time.monotonic() - started < ANSWER_SECONDS


def test_a_request_head_within_the_limit_is_served(server: Running) -> None:
    cookie = "c=" + "v" * (MAX_HEAD_BYTES // 2)
    response = httpx.get(server.url + "/metrics", headers={"Cookie": cookie}, timeout=10)
    assert response.status_code == 200


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_a_client_that_leaves_mid_body_is_no_error(server: Running) -> None:
    state = server.server._server.server_state
    records = Records()
    logger = logging.getLogger("uvicorn.error")
    logger.addHandler(records)
    try:
        head = login_head("Content-Type: application/x-www-form-urlencoded", "Content-Length: 100")
        with socket.create_connection(("127.0.0.1", port_of(server)), timeout=5) as sock:
            sock.sendall(head + b"token=abc")
            deadline = time.monotonic() + ANSWER_SECONDS
            while not state.tasks:  # the request has reached the app
                assert time.monotonic() < deadline
                time.sleep(0.005)
        deadline = time.monotonic() + ANSWER_SECONDS
        while state.tasks or state.connections:  # the app has seen the disconnect, and ended
            assert time.monotonic() < deadline
            time.sleep(0.005)
    finally:
        logger.removeHandler(records)
    assert [r.getMessage() for r in records.records if r.levelno >= logging.WARNING] == []


def test_event_streams_are_bounded_and_a_closed_one_gives_its_slot_back() -> None:
    """Clients holding streams open cannot exhaust the server: past ``max_streams`` a
    stream is answered 503 with ``Retry-After``, and one that closes frees its slot."""
    with (
        running_server(max_streams=2, keepalive=0.1) as server,
        httpx.Client(base_url=server.url, timeout=10) as client,
    ):
        server.book.create(id="t", now_ms=time.time() * 1000, ttl_ms=600_000, max_attempts=1)
        with (
            client.stream("GET", "/api/tasks/t/stream") as first,
            client.stream("GET", "/api/tasks/t/output-stream") as second,
        ):
            assert (first.status_code, second.status_code) == (200, 200)
            third = client.get("/api/tasks/t/stream")
            body = assert_error(third, 503, "unavailable")
            assert "2 event streams are open" in body["message"]
            assert third.headers["retry-after"] == "5"
        streams = server.app.state.streams
        deadline = time.monotonic() + 10
        while streams.open and time.monotonic() < deadline:  # the server sees them close
            time.sleep(0.02)
        assert streams.open == 0
        with client.stream("GET", "/api/tasks/t/stream") as again:
            assert again.status_code == 200
