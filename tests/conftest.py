"""Shared fixtures: a factory of books, parametrized over every book implementation."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from asyncbook import AsyncBook, MemoryBook

BookFactory = Callable[..., AsyncBook]

BOOK_KINDS = ["memory"]


@pytest.fixture(params=BOOK_KINDS)
def make_book(request: pytest.FixtureRequest) -> Iterator[BookFactory]:
    """Build books of one kind; each test gets its own, cleaned up afterwards."""
    kind = request.param
    if kind == "memory":

        def factory(**kwargs: Any) -> AsyncBook:
            return MemoryBook(**kwargs)

        yield factory
        return
    raise AssertionError(f"unknown book kind {kind}")


@pytest.fixture
def book(make_book: BookFactory) -> AsyncBook:
    """One book with the default settings."""
    return make_book()
