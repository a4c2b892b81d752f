"""The bounds a book puts on what a task may store (docs/spec.md, "Limits"): an id over
``TASK_ID_LIMIT`` characters is refused on every book, naming ``taskId``, and nothing is
stored; an error given to the book directly is stored as given, as the reference does."""

from __future__ import annotations

import pytest

from asyncbook import AsyncBookError, CreateSpec
from asyncbook._limits import TASK_ID_LIMIT

from ..support.books import BookFactory
from ..support.events import fail, start

LONG_ID = "x" * (TASK_ID_LIMIT + 1)


def test_an_id_over_the_limit_is_refused_naming_task_id(make_book: BookFactory) -> None:
    book = make_book()
    with pytest.raises(AsyncBookError) as caught:
        book.create(id=LONG_ID, now_ms=0, ttl_ms=10, max_attempts=1)
    assert (caught.value.code, caught.value.field) == ("invalid-request", "taskId")
    assert str(TASK_ID_LIMIT) in caught.value.message
    (answer,) = book.create_many([CreateSpec(LONG_ID, 0, 10, 1)])
    assert isinstance(answer, AsyncBookError)
    assert answer.field == "taskId"
    assert book.get(LONG_ID) is None
    assert book.list_tasks().tasks == ()


def test_an_id_of_the_limit_is_taken(make_book: BookFactory) -> None:
    """Characters are counted, not bytes: 4,096 of them, two UTF-8 bytes each."""
    book = make_book()
    task_id = "ü" * TASK_ID_LIMIT
    assert book.create(id=task_id, now_ms=0, ttl_ms=10, max_attempts=1).id == task_id


def test_an_error_given_directly_is_stored_as_given(make_book: BookFactory) -> None:
    """Only the Celery integration caps the error it forms: the book stores what it is
    given, byte for byte as the reference does."""
    book = make_book()
    book.create(id="t", now_ms=0, ttl_ms=10_000, max_attempts=1)
    book.apply("t", start(1))
    error = "o" * 100_000
    assert book.apply("t", fail(2, error=error)).task.error == error
