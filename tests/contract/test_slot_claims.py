"""A limited start's one call (concurrency limits, extension): ``claim_run_in_slot`` on
every book takes the slot only for a start about to be granted, and over the limit
leaves the record unchanged while the task waits in the key's line."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from redis.crc import key_slot

from asyncbook import AsyncBook, AsyncBookError, CallbackResult, Held, Slot, SlotStart

from ..conftest import BOOK_KINDS, book_factories
from ..support.books import BookFactory

FAR = 10**15
LEASE = 60_000


@pytest.fixture(params=BOOK_KINDS)
def make_book(request: pytest.FixtureRequest, namespace: str) -> Iterator[BookFactory]:
    """Books of one shard (a sharded namespace refuses limited claims: the test below)."""
    yield from book_factories(request, request.param, namespace)


def test_a_sharded_namespace_refuses_a_limited_claim_naming_limit(sharded: Any) -> None:
    sharded.create(id="a", now_ms=sharded.now_ms(), ttl_ms=FAR, max_attempts=3,
                   heartbeat_timeout_ms=60_000)  # fmt: skip
    with pytest.raises(AsyncBookError) as refused:
        sharded.claim_run_in_slot("a", "w", ("k", 1, LEASE))
    assert refused.value.field == "limit"
    assert sharded.get("a").state.value == "queued"


def limited(book: AsyncBook, *ids: str, timeout: int = 60_000) -> Any:
    """The book with queued tasks ``ids``."""
    for task_id in ids:
        book.create(
            id=task_id, now_ms=book.now_ms(), ttl_ms=FAR, max_attempts=3,
            heartbeat_timeout_ms=timeout,
        )  # fmt: skip
    return book


def started(answer: SlotStart) -> CallbackResult:
    assert isinstance(answer.result, CallbackResult)
    return answer.result


def test_a_start_takes_its_slot_in_its_claim_and_over_the_limit_waits_unchanged(
    book: Any,
) -> None:
    book = limited(book, "a", "b", "c")
    first = book.claim_run_in_slot("a", "w1", ("k", 1, LEASE, "pa"))
    assert first.slot == Slot(True, (), 0)
    assert started(first).reason == "started"
    assert isinstance(book.claim_run("b", "w1"), CallbackResult)  # a plain claim: no slot
    before = book.get("c")
    waits = book.claim_run_in_slot("c", "w1", ("k", 1, LEASE, "pc"))
    assert waits == SlotStart(None, Slot(False, (), 1))
    assert book.get("c") == before  # the record unchanged
    again = book.claim_run_in_slot("c", "w2", ("k", 1, LEASE, "other"))
    assert again == SlotStart(None, Slot(False, (), 1))  # it keeps its place, once
    assert book.release_slot("k", "a", 1, lease_ms=LEASE) == Slot(False, ("pc",), 0)
    given = book.claim_run_in_slot("c", "w2", ("k", 1, LEASE, "pc"))
    assert given.slot == Slot(True, (), 0)
    assert started(given).task.attempts == 1


def test_a_refused_start_looks_at_no_slot(book: Any) -> None:
    book = limited(book, "held", "ended", "seen")
    assert started(book.claim_run_in_slot("held", "w1", ("k", 1, LEASE))).reason == "started"
    held = book.claim_run_in_slot("held", "w2", ("k", 1, LEASE))
    assert held.slot is None
    assert isinstance(held.result, Held)
    book.cancel("ended")
    ended = book.claim_run_in_slot("ended", "w1", ("other", 1, LEASE))
    assert ended.slot is None
    assert started(ended).reason == "terminal-conflict"
    book.apply("seen", {"type": "start", "atMs": book.now_ms(), "worker": "w"}, "cb")
    seen = book.claim_run_in_slot("seen", "w1", ("other", 1, LEASE), callback_id="cb")
    assert seen.slot is None
    assert started(seen).duplicate_callback
    assert book.take_slot("other", "x", 1, lease_ms=LEASE).granted  # no slot was taken


def test_a_stale_holder_is_ended_then_its_redelivery_takes_the_slot(book: Any) -> None:
    book = limited(book, "s", timeout=50)
    assert started(book.claim_run_in_slot("s", "w1", ("k", 1, 1))).task.attempts == 1
    time.sleep(0.1)  # no heartbeat: the holder is stale, its lease lapsed
    again = book.claim_run_in_slot("s", "w2", ("k", 1, LEASE))
    assert again.slot == Slot(True, (), 0)
    assert started(again).task.attempts == 2


@pytest.mark.parametrize(
    ("slot", "field"),
    [
        (("k", 1), "slot"),
        ("k", "slot"),
        (("", 1, 1), "key"),
        (("k", 0, 1), "limit"),
        (("k", 1, 0), "leaseMs"),
        (("k", 1, 1, 5), "payload"),
    ],
)
def test_a_bad_slot_is_refused_naming_its_field(book: Any, slot: Any, field: str) -> None:
    book = limited(book, "a")
    with pytest.raises(AsyncBookError) as refused:
        book.claim_run_in_slot("a", "w", slot)
    assert refused.value.field == field
    assert book.get("a").state.value == "queued"


@pytest.mark.parametrize("make_book", [k for k in BOOK_KINDS if k != "memory"], indirect=True)
def test_a_task_and_its_slots_share_one_cluster_slot(book: Any) -> None:
    book = limited(book, "a")
    keys = book.shard_of("a").keys
    assert key_slot(keys.task("a").encode()) == key_slot(keys.slot_running("k").encode())
    assert key_slot(keys.stalls.encode()) == key_slot(keys.slot_line("k").encode())
