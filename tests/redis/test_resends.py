"""``claim_resends`` and the kept message on RedisBook: one retry per task, ever (the
script decides, under concurrency too), and the kept message's key and retention."""

from __future__ import annotations

import threading

import pytest
import redis

from asyncbook import PublishInfo, RedisBook
from asyncbook.redis import ResendClaim, claim_resends

from ..support.retries import HOUR_MS, ended_task, kept_message

pytestmark = pytest.mark.redis


def test_a_kept_message_lives_as_long_as_its_task_can(book: RedisBook, client: redis.Redis) -> None:
    message = kept_message()
    book.create(id="t", now_ms=book.now_ms(), ttl_ms=HOUR_MS, max_attempts=1,
                info=PublishInfo(message=message.to_json()))  # fmt: skip
    key = book.keys.message("t")
    assert client.get(key) == message.to_json().encode()
    assert book.retention is not None
    longest = HOUR_MS + book.retention.total_seconds() * 1000  # its life, then retention
    assert longest - 5_000 < client.pttl(key) <= longest
    # Not kept: no key.
    book.create(id="u", now_ms=book.now_ms(), ttl_ms=HOUR_MS, max_attempts=1)
    assert client.exists(book.keys.message("u")) == 0


def test_two_retries_at_once_create_one_task(book: RedisBook) -> None:
    ended_task(book, "t", message=kept_message())
    start = threading.Barrier(8)
    claims: list[ResendClaim] = []

    def retry() -> None:
        start.wait()
        claims.extend(claim_resends(book.engine, ["t"], actor="ops", reason="double click"))

    threads = [threading.Thread(target=retry) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    created = [claim for claim in claims if claim.new_id is not None]
    assert len(created) == 1
    new_id = created[0].new_id
    refused = [claim for claim in claims if claim.new_id is None]
    assert {(claim.code, claim.detail) for claim in refused} == {("already-retried", new_id)}
    assert book.count_by_state()["queued"] == 1
    info = book.info("t")
    assert info is not None
    assert info.retried_as == new_id


def test_a_retried_task_keeps_its_message_and_can_be_retried_in_turn(book: RedisBook) -> None:
    ended_task(book, "t", "cancelled", kept_message())
    [first] = claim_resends(book.engine, ["t"], actor="ops")
    assert first.new_id is not None
    book.cancel(first.new_id, "again")
    [second] = claim_resends(book.engine, [first.new_id])
    assert second.new_id is not None
    assert second.message == first.message == kept_message()
    info = book.info(first.new_id)
    assert info is not None
    assert (info.retry_of, info.retried_as, info.retried_by) == ("t", second.new_id, "ops")


def test_bad_actor_or_reason_is_refused_before_anything_is_written(book: RedisBook) -> None:
    ended_task(book, "t", message=kept_message())
    for given in ({"actor": "x" * 1001}, {"reason": "\udcff"}, {"reason": 7}):
        with pytest.raises(Exception, match=r"actor|reason") as raised:
            claim_resends(book.engine, ["t"], **given)
        assert getattr(raised.value, "field", None) in ("actor", "reason")
    info = book.info("t")
    assert info is not None
    assert info.retried_as is None
