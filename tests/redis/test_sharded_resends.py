"""Retries on a four-shard book: each in its task's shard, the new task beside it (one
retry.lua call decides, as on one shard), answers in the order asked."""

from __future__ import annotations

import threading

import pytest
import redis

from asyncbook import AsyncBookError, RedisBook
from asyncbook.redis import ResendClaim, ShardedRedisBook
from asyncbook.redis._resends import claim_sharded_resends

from ..support.retries import ended_task, kept_message

pytestmark = pytest.mark.redis

IDS = [f"r{i}" for i in range(8)]


@pytest.fixture
def sharded(client: redis.Redis, namespace: str) -> ShardedRedisBook:
    book = RedisBook(client, namespace=namespace, shards=4)
    assert isinstance(book, ShardedRedisBook)
    assert {book.map.index_of(task_id) for task_id in IDS} == {0, 1, 2, 3}
    for task_id in IDS:
        ended_task(book, task_id, message=kept_message())
    return book


def test_each_retry_is_made_in_its_task_s_shard(sharded: ShardedRedisBook) -> None:
    asked = [*IDS[::-1], "nobody"]
    claims = claim_sharded_resends(sharded, asked, actor="ops", reason="deploy")
    assert [claim.task_id for claim in claims] == asked
    assert claims[-1].code == "not-found"
    for claim in claims[:-1]:
        assert claim.new_id is not None
        assert sharded.map.index_of(claim.new_id) == sharded.map.index_of(claim.task_id)
        info = sharded.info(claim.new_id)
        assert info is not None
        assert (info.retry_of, info.retried_by, info.retry_reason) == (
            claim.task_id,
            "ops",
            "deploy",
        )
        [entry] = sharded.audit(claim.task_id)
        assert (entry.outcome, entry.retried_as) == ("retried", claim.new_id)
    again = claim_sharded_resends(sharded, IDS[:2])
    assert {claim.code for claim in again} == {"already-retried"}
    assert sharded.count_by_state()["queued"] == len(IDS)


def test_two_retries_at_once_create_one_task(sharded: ShardedRedisBook) -> None:
    start = threading.Barrier(6)
    claims: list[ResendClaim] = []

    def retry() -> None:
        start.wait()
        claims.extend(claim_sharded_resends(sharded, [IDS[5]], actor="ops"))

    threads = [threading.Thread(target=retry) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    created = [claim for claim in claims if claim.new_id is not None]
    assert len(created) == 1
    assert {claim.code for claim in claims if claim.new_id is None} == {"already-retried"}
    assert sharded.count_by_state()["queued"] == 1


def test_bad_input_is_refused_before_any_shard_is_written(sharded: ShardedRedisBook) -> None:
    for ids, given, field in (
        ([*IDS, 7], {}, "taskId"),
        (IDS, {"actor": "x" * 1001}, "actor"),
        (IDS, {"reason": 7}, "reason"),
    ):
        with pytest.raises(AsyncBookError) as raised:
            claim_sharded_resends(sharded, ids, **given)  # type: ignore[arg-type]
        assert raised.value.field == field
    assert sharded.count_by_state()["queued"] == 0
