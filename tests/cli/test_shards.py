"""The CLI on a sharded namespace: the shard count given (``--shards``, env
``ASYNCBOOK_SHARDS``) or discovered from the one the namespace stored, ``ls`` and
``watch`` across shards, and ``doctor``'s shard map."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest
import redis

from asyncbook import RedisBook
from asyncbook.cli._doctor import _namespaces
from asyncbook.redis import AsyncRedisBook, ShardedRedisBook
from asyncbook.web import BookChangeFeed

from ..support.books import delete_namespace
from ..support.cli import CLI_REDIS_URL, run
from ..support.servers import wait_until

pytestmark = pytest.mark.redis

IDS = [f"s{i}" for i in range(8)]
NOW = 1_000_000


@pytest.fixture
def book(namespace: str) -> Iterator[RedisBook]:
    """A four-shard book of the test's namespace, its tasks in every shard."""
    client = redis.Redis.from_url(CLI_REDIS_URL)
    book = RedisBook(client, namespace=namespace, shards=4)
    for task_id in IDS:
        book.create(id=task_id, now_ms=NOW, ttl_ms=10_000_000, max_attempts=1)
    yield book
    delete_namespace(client, namespace)
    client.close()


def listed(output: str) -> list[str]:
    return [row["id"] for row in json.loads(output)["tasks"]]


def test_the_count_is_discovered_or_given(book: RedisBook) -> None:
    assert isinstance(book, ShardedRedisBook)
    assert {book.map.index_of(task_id) for task_id in IDS} == {0, 1, 2, 3}
    discovered = run(book, "ls", "--json")
    assert discovered.exit_code == 0, discovered.output
    assert listed(discovered.output) == IDS[::-1]
    given = run(book, "--shards", "4", "ls", "--json")
    assert listed(given.output) == IDS[::-1]
    status = run(book, "status", "s5", "--json")
    assert status.exit_code == 0, status.output
    # Another count is refused at the first write, naming the option's field.
    wrong = run(book, "--shards", "2", "cancel", "s5", "--reason", "x")
    assert wrong.exit_code == 2
    assert "has 4 shards" in wrong.output


@pytest.mark.parametrize(
    "command",
    [
        ("ls", "--json"),
        ("ls",),
        ("status", "s5"),
        ("status", "s5", "--json"),
        ("history", "s5"),
        ("group", "g"),
        ("workers",),
        ("stats",),
        ("audit",),
    ],
)
def test_reads_with_another_count_are_refused(book: RedisBook, command: tuple[str, ...]) -> None:
    """``--shards 2`` on a four-shard namespace listed the tasks of two shards and said
    "no task" of the others: now every read is refused as a write is, naming the count."""
    wrong = run(book, "--shards", "2", *command)
    assert wrong.exit_code == 2, wrong.output
    assert "has 4 shards; open it with shards=4" in wrong.output


def test_the_environment_gives_the_count(book: RedisBook, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASYNCBOOK_SHARDS", "4")
    assert listed(run(book, "ls", "--json").output) == IDS[::-1]
    monkeypatch.setenv("ASYNCBOOK_SHARDS", "0")
    assert run(book, "ls").exit_code == 2  # out of range: a usage error


def test_watch_follows_the_task_s_shard(book: RedisBook) -> None:
    assert isinstance(book, ShardedRedisBook)
    task_id = IDS[3]
    channel = book.shard_of(task_id).keys.changes_channel

    def work() -> None:
        wait_until(lambda: dict(book.client.pubsub_numsub(channel)).get(channel.encode(), 0) > 0)
        book.apply(task_id, {"type": "start", "atMs": NOW + 1, "worker": "w"})
        book.apply(
            task_id, {"type": "succeed", "atMs": NOW + 2, "resultRef": "r", "resultHash": "h"}
        )

    worker = threading.Thread(target=work)
    worker.start()
    result = run(book, "watch", task_id, "--json")
    worker.join()
    assert result.exit_code == 0, result.output
    states = [json.loads(line)["data"].get("state") for line in result.output.splitlines()]
    assert states[-1] == "succeeded"


def test_doctor_shows_the_shard_map(book: RedisBook) -> None:
    result = run(book, "doctor", "--json")
    checks = {check["name"]: check for check in json.loads(result.output)["checks"]}
    assert checks["shards"]["status"] == "ok"
    assert checks["shards"]["detail"].startswith("4 shards: ")
    assert checks["shards"]["detail"].endswith("holds 0, 1, 2, 3")
    assert checks["namespace"]["status"] == "ok"


def test_serve_reads_the_sharded_book_and_follows_every_shard(
    book: RedisBook, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncbook.web

    served: list[tuple[object, object]] = []
    monkeypatch.setattr(
        asyncbook.web, "serve", lambda reader, feed, **options: served.append((reader, feed))
    )
    result = run(book, "serve")
    assert result.exit_code == 0, result.output
    [(reader, feed)] = served
    assert isinstance(reader, AsyncRedisBook)
    assert reader.shards == 4
    assert isinstance(feed, BookChangeFeed)
    assert isinstance(book, ShardedRedisBook)
    assert feed.channel == book.change_channels


def test_doctor_knows_a_sharded_namespace_was_written(book: RedisBook) -> None:
    """Among the namespaces it names when the one asked for was never written."""
    assert book.namespace in _namespaces(book.client)
