"""The contract runs over every book kind, sharded namespaces included."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ..conftest import BOOK_KINDS, SHARDED_KINDS, book_factories
from ..support.books import BookFactory


@pytest.fixture(params=BOOK_KINDS + SHARDED_KINDS)
def make_book(request: pytest.FixtureRequest, namespace: str) -> Iterator[BookFactory]:
    """Build books of one kind, sharded ones too; each test gets its own."""
    yield from book_factories(request, request.param, namespace)
