"""The contract runs over every book kind, sharded namespaces included."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from asyncbook import AsyncBook

from ..conftest import BOOK_KINDS, SHARDED_KINDS, book_factories
from ..support.books import BookFactory


@pytest.fixture(params=BOOK_KINDS + SHARDED_KINDS)
def make_book(request: pytest.FixtureRequest, namespace: str) -> Iterator[BookFactory]:
    """Build books of one kind, sharded ones too; each test gets its own."""
    yield from book_factories(request, request.param, namespace)


@pytest.fixture(params=SHARDED_KINDS)
def sharded(request: pytest.FixtureRequest, namespace: str) -> Iterator[AsyncBook]:
    """A book of a sharded namespace, for what only sharded books answer (a refusal)."""
    for factory in book_factories(request, request.param, namespace):
        yield factory()
