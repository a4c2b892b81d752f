"""Concurrency limits across workers (extension): ``take_slot`` and ``release_slot`` on
every book; a sharded namespace refuses them naming ``limit``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from asyncbook import AsyncBook, AsyncBookError, Slot

from ..conftest import BOOK_KINDS, book_factories
from ..support.books import BookFactory

FAR = 10**15


@pytest.fixture(params=BOOK_KINDS)
def make_book(request: pytest.FixtureRequest, namespace: str) -> Iterator[BookFactory]:
    """Books of one shard (a sharded namespace refuses slots: the test below)."""
    yield from book_factories(request, request.param, namespace)


def test_a_sharded_namespace_refuses_slots_naming_limit(sharded: Any) -> None:
    for call in (sharded.take_slot, sharded.release_slot):
        with pytest.raises(AsyncBookError) as refused:
            call("k", "a", 1, lease_ms=1000)
        assert refused.value.field == "limit"


def slots(book: AsyncBook) -> Any:
    """The book, typed for its slot calls."""
    return book


def test_slots_are_taken_up_to_the_limit_then_tasks_wait_in_order(book: Any) -> None:
    book = slots(book)
    assert book.take_slot("k", "a", 2, lease_ms=60_000, payload="pa").granted
    assert book.take_slot("k", "b", 2, lease_ms=60_000, payload="pb").granted
    assert book.take_slot("k", "a", 2, lease_ms=60_000, payload="pa").granted  # kept
    for waiting in "cde":
        assert not book.take_slot("k", waiting, 2, lease_ms=60_000, payload="p" + waiting).granted
    assert not book.take_slot("k", "c", 2, lease_ms=60_000, payload="again").granted  # once
    assert book.take_slot("other", "x", 2, lease_ms=60_000).granted  # keys are apart
    assert book.take_slot("k", "e", 2, lease_ms=60_000).waiting == 3
    assert book.release_slot("k", "a", 2, lease_ms=60_000) == Slot(False, ("pc",), 2)
    assert book.take_slot("k", "c", 2, lease_ms=60_000, payload="pc").granted  # given to it
    assert book.release_slot("k", "nobody", 2, lease_ms=60_000).released == ()
    assert book.release_slot("k", "b", 2, lease_ms=60_000).released == ("pd",)
    assert book.release_slot("k", "c", 2, lease_ms=60_000).released == ("pe",)


def test_a_lapsed_lease_frees_its_slot_at_the_next_call(book: Any) -> None:
    book = slots(book)
    assert book.take_slot("k", "a", 1, lease_ms=1).granted
    time.sleep(0.01)  # no release: its worker died before the attempt's start
    assert book.take_slot("k", "b", 1, lease_ms=60_000).granted


def test_a_running_attempt_keeps_its_slot_by_heartbeat_and_loses_it_when_they_stop(
    book: Any,
) -> None:
    book = slots(book)
    book.create(
        id="a", now_ms=book.now_ms(), ttl_ms=FAR, max_attempts=1, heartbeat_timeout_ms=1_000
    )
    assert book.take_slot("k", "a", 1, lease_ms=1).granted
    book.claim_run("a", "w1")  # its stall time: 1 s from now
    time.sleep(0.3)
    assert not book.take_slot("k", "b", 1, lease_ms=60_000, payload="pb").granted
    book.heartbeat(["a"])  # its stall time: 1 s from now again
    time.sleep(0.8)  # past the first stall time, before the second
    assert book.release_slot("k", "nobody", 1, lease_ms=60_000).released == ()  # still alive
    time.sleep(1.5)  # its worker died: no heartbeat, no release
    assert book.release_slot("k", "nobody", 1, lease_ms=60_000).released == ("pb",)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("", "a", 1, 1), "key"),
        (("k", 7, 1, 1), "taskId"),
        (("k", "a", 0, 1), "limit"),
        (("k", "a", True, 1), "limit"),
        (("k", "a", 1, 0), "leaseMs"),
    ],
)
def test_bad_arguments_are_refused_naming_their_field(
    book: Any, args: tuple[Any, ...], field: str
) -> None:
    book = slots(book)
    key, task_id, limit, lease = args
    with pytest.raises(AsyncBookError) as refused:
        book.take_slot(key, task_id, limit, lease_ms=lease)
    assert refused.value.field == field
