"""Output streams (extension): appends by a running attempt, reads from a cursor, the
bounds, on every book."""

from __future__ import annotations

import pytest

from asyncbook import AsyncBook, AsyncBookError, UnknownTaskError
from asyncbook._output import (
    OUTPUT_BATCH_MAX,
    OUTPUT_CHUNK_MAX_BYTES,
    OUTPUT_TASK_MAX_BYTES,
)

from ..support.events import fail, start, succeed

FAR = 10**15


def running(book: AsyncBook, task_id: str = "o") -> int:
    now = book.now_ms()
    book.create(id=task_id, now_ms=now, ttl_ms=FAR, max_attempts=2)
    book.apply(task_id, start(at=now))
    return now


def test_chunks_are_numbered_and_read_after_a_cursor(book: AsyncBook) -> None:
    running(book)
    first = book.append_output("o", "Hel", "lo")
    assert (first.cursor, first.attempt, first.total_bytes) == (2, 1, 5)
    assert book.append_output("o", " wörld").cursor == 3
    page = book.output("o")
    assert [c.chunk for c in page.chunks] == ["Hel", "lo", " wörld"]
    assert [c.seq for c in page.chunks] == [1, 2, 3]
    assert {c.attempt for c in page.chunks} == {1}
    assert (page.cursor, page.state, page.done) == (3, "running", False)
    after = book.output("o", 1, limit=1)
    assert [c.chunk for c in after.chunks] == ["lo"]
    assert after.cursor == 2
    assert book.output("o", "2").chunks[0].chunk == " wörld"  # an SSE Last-Event-ID
    caught_up = book.output("o", 3)
    assert (caught_up.chunks, caught_up.cursor) == ((), 3)


def test_each_attempt_is_labelled_and_the_end_is_told(book: AsyncBook) -> None:
    now = running(book)
    book.append_output("o", "one")
    book.apply("o", fail(at=now + 1, retryable=True))
    with pytest.raises(AsyncBookError) as refused:
        book.append_output("o", "between")
    assert (refused.value.field, "queued" in refused.value.message) == ("taskId", True)
    book.apply("o", start(at=now + 2))
    assert book.append_output("o", "two").attempt == 2
    book.apply("o", succeed(at=now + 3))
    page = book.output("o")
    assert [(c.attempt, c.chunk) for c in page.chunks] == [(1, "one"), (2, "two")]
    assert (page.state, page.attempt, page.done) == ("succeeded", 2, True)
    assert not book.output("o", 0, limit=2).done  # a full page: read on to be sure
    with pytest.raises(AsyncBookError, match="succeeded"):
        book.append_output("o", "late")


def test_bad_appends_are_refused_naming_the_field_and_write_nothing(book: AsyncBook) -> None:
    running(book)
    with pytest.raises(UnknownTaskError):
        book.append_output("nope", "x")
    with pytest.raises(UnknownTaskError):
        book.output("nope")
    bad: list[tuple[object, ...]] = [
        (),
        ("",),
        (3,),
        ("ok", "x" * (OUTPUT_CHUNK_MAX_BYTES + 1)),
        ("\ud800",),
        ("x",) * (OUTPUT_BATCH_MAX + 1),
    ]
    for chunks in bad:
        with pytest.raises(AsyncBookError) as refused:
            book.append_output("o", *chunks)  # type: ignore[arg-type]
        assert refused.value.field == "chunk", chunks
    for cursor, limit in [(-1, 10), ("x", 10), (True, 10), (0, 0), (0, 10_000)]:
        with pytest.raises(AsyncBookError) as refused:
            book.output("o", cursor, limit)  # type: ignore[arg-type]
        assert refused.value.field in ("cursor", "limit")
    assert book.output("o").chunks == ()
    assert book.append_output("o", "x" * OUTPUT_CHUNK_MAX_BYTES).cursor == 1


def test_the_output_of_a_task_is_bounded(book: AsyncBook) -> None:
    running(book)
    big = "y" * OUTPUT_CHUNK_MAX_BYTES
    per_call = 100
    calls = OUTPUT_TASK_MAX_BYTES // (OUTPUT_CHUNK_MAX_BYTES * per_call)
    for _ in range(calls):
        book.append_output("o", *[big] * per_call)
    held = book.output("o", 0, limit=1).chunks[0]
    assert held.seq == 1
    left = (OUTPUT_TASK_MAX_BYTES - calls * per_call * OUTPUT_CHUNK_MAX_BYTES) // len(big)
    if left:
        book.append_output("o", *[big] * left)
    with pytest.raises(AsyncBookError, match="full") as refused:
        book.append_output("o", "z")
    assert refused.value.field == "chunk"
    assert book.output("o", calls * per_call + left - 1).cursor == calls * per_call + left
