"""RedisBook.from_url against throwaway servers: TLS, ACL users, unix sockets, Sentinel."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from asyncbook import AsyncBookError, RedisBook
from asyncbook.redis import connect

from ..support.cluster import require_binaries
from ..support.events import start, succeed
from ..support.servers import free_port, redis_server, wait_until


def exercise(book: RedisBook) -> None:
    book.create(id="conn", now_ms=0, ttl_ms=1000, max_attempts=1)
    book.apply("conn", start(), "cb-1")
    book.apply_many([("conn", succeed(), "cb-2")])
    task = book.get("conn")
    assert task is not None
    assert (task.state, task.version) == ("succeeded", 2)
    assert [note.task_id for note in book.drain_notifications()] == ["conn"]


@pytest.fixture(autouse=True)
def binaries() -> None:
    require_binaries()


@pytest.fixture
def acl_port(tmp_path: Path) -> Iterator[int]:
    port = free_port()
    with redis_server(
        tmp_path / "acl",
        "--port", str(port),
        "--user", "default", "off",
        "--user", "booker", "on", ">s3cret:pw", "~*", "&*", "+@all",
    ):  # fmt: skip
        wait_until(lambda: redis.Redis(port=port, username="booker", password="s3cret:pw").ping())
        yield port


def test_acl_user_and_password(acl_port: int) -> None:
    exercise(RedisBook.from_url(f"redis://booker:s3cret%3Apw@127.0.0.1:{acl_port}/0"))
    with pytest.raises(redis.AuthenticationError):
        RedisBook.from_url(f"redis://booker:wrong@127.0.0.1:{acl_port}/0").get("x")


def test_tls(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
         "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True,
        capture_output=True,
    )  # fmt: skip
    port = free_port()
    with redis_server(
        tmp_path / "tls",
        "--port", "0",
        "--tls-port", str(port),
        "--tls-cert-file", str(cert),
        "--tls-key-file", str(key),
        "--tls-ca-cert-file", str(cert),
        "--tls-auth-clients", "no",
    ):  # fmt: skip
        url = f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={cert}"
        wait_until(lambda: connect(url).ping(), what="TLS server")
        exercise(RedisBook.from_url(url))


def test_unix_socket(tmp_path: Path) -> None:
    sock = tmp_path / "redis.sock"
    with redis_server(tmp_path / "unix", "--port", "0", "--unixsocket", str(sock)):
        url = f"unix://{sock}?db=0"
        wait_until(lambda: connect(url).ping(), what="unix-socket server")
        exercise(RedisBook.from_url(url))


def test_sentinel(tmp_path: Path, acl_port: int) -> None:
    sentinel_port = free_port()
    config = tmp_path / "sentinel.conf"
    config.write_text(
        f"port {sentinel_port}\n"
        f"sentinel monitor books 127.0.0.1 {acl_port} 1\n"
        "sentinel auth-user books booker\n"
        "sentinel auth-pass books s3cret:pw\n"
    )
    with redis_server(tmp_path / "sentinel-dir", str(config), "--sentinel"):
        wait_until(
            lambda: redis.Redis(port=sentinel_port).sentinel_get_master_addr_by_name("books"),
            what="sentinel",
        )
        exercise(
            RedisBook.from_url(
                f"redis+sentinel://booker:s3cret%3Apw@127.0.0.1:{sentinel_port}/books/0"
            )
        )


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1",
        "127.0.0.1:6379",
        "redis+sentinel://127.0.0.1:1/",
        "redis+sentinel://127.0.0.1/books",
        "redis+sentinel://127.0.0.1:1/books/x",
    ],
)
def test_bad_urls_name_the_field(url: str) -> None:
    with pytest.raises(AsyncBookError) as caught:
        RedisBook.from_url(url)
    assert caught.value.field == "redis_url"
