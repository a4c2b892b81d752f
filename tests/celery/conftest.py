"""The Celery area's fixtures, on the Celery test Redis (``CELERY_URL``, db 12):

- ``client``: a client on it for the module (fails the test when Redis does not answer);
- ``namespace``: a fresh namespace; afterwards its book keys and the Celery metas kept under
  ``<namespace>:`` are removed;
- ``book``: the RedisBook of that namespace;
- ``webhook``: a loopback webhook sink for the module (a worker subprocess posts to it).

A module whose tests share one book (a worker subprocess's) defines its own module-scoped
``namespace`` or ``book``; an in-process module defines ``book`` on fakeredis. Apps, workers
and waiting are in ``tests/support/celery.py``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from asyncbook import RedisBook
from asyncbook.cli._demo import WebhookReceiver

from ..support.books import redis_client
from ..support.celery import CELERY_URL, cleared_namespace


@pytest.fixture(scope="module")
def client() -> Iterator[redis.Redis]:
    """A client on the Celery test Redis."""
    client = redis_client(CELERY_URL)
    yield client
    client.close()


@pytest.fixture
def namespace() -> Iterator[str]:
    """A fresh namespace on the Celery test Redis, cleaned up afterwards."""
    yield from cleared_namespace(CELERY_URL, "celery")


@pytest.fixture
def book(namespace: str) -> RedisBook:
    """The book of ``namespace`` on the Celery test Redis."""
    return RedisBook.from_url(CELERY_URL, namespace=namespace)


@pytest.fixture(scope="module")
def webhook() -> Iterator[WebhookReceiver]:
    """A loopback webhook sink for the module; it keeps every request it receives."""
    receiver = WebhookReceiver()
    yield receiver
    receiver.close()
