"""Every facade on every layout answers as ``MemoryBook``: the same seeded sequences of
calls (``support/parity``: groups, foreign callback ids, cancels, expiries, retries,
audit, deliveries, reads) through ``RedisBook`` and ``AsyncRedisBook``, on one shard and
four of the test Redis and sixteen of the local Cluster; every answer, error (class,
code, field) and notification compared, after ``normalised``.

Every call is the facade's own: ``test_the_asyncio_facade_has_the_whole_surface`` fails
where ``AsyncRedisBook`` lacks one (``ASYNC_FALLBACKS``, which the runner would send
through a sync book of the same namespace).
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

import pytest

from asyncbook import MemoryBook, RedisBook
from asyncbook.redis import AsyncRedisBook

from ..support.books import delete_namespace, kind_async_client, kind_client
from ..support.parity import (
    ASYNC_FALLBACKS,
    FALLEN_BACK,
    Step,
    assert_parity,
    parity_batch,
    run_async_steps,
    run_steps,
    sync_facade,
)
from ..support.reference_cases import RETENTION_VERSIONS, as_json

SEED = 31
SEQUENCES = {"redis-s1": 30, "redis-s4": 30, "cluster-s16": 20}
LENGTH = 25
"""``make test``'s sequences of each layout, for each facade (the long test runs ten
times more); the Cluster's sixteen shards take about three times as long a step."""
LAYOUTS = {
    "redis-s1": ("redis", 1),
    "redis-s4": ("redis-s4", 4),
    "cluster-s16": ("cluster-s16", 16),
}
"""Each layout: the server (a book kind of ``kind_client``) and the shard count."""
FACADES = ["sync", "asyncio"]


def check(request: pytest.FixtureRequest, layout: str, facade: str, seed: int, count: int) -> None:
    check_sequences(request, layout, facade, f"seed {seed}", parity_batch(seed, count, LENGTH))


def check_sequences(
    request: pytest.FixtureRequest, layout: str, facade: str, name: str, sequences: list[list[Step]]
) -> None:
    """Each sequence through ``facade`` on ``layout`` answers as through ``MemoryBook``."""
    want = [
        as_json(run_steps(sync_facade(MemoryBook(retention_versions=RETENTION_VERSIONS)), steps))
        for steps in sequences
    ]
    kind, shards = LAYOUTS[layout]
    client = kind_client(request, kind)
    base = f"parity-{uuid.uuid4().hex[:12]}"
    got = []
    try:
        for number, steps in enumerate(sequences):
            settings: dict[str, Any] = {
                "namespace": f"{base}-{number}",
                "retention_versions": RETENTION_VERSIONS,
                "shards": shards,
            }
            book = RedisBook(client, **settings)
            if facade == "sync":
                got.append(run_steps(sync_facade(book), steps))
            else:

                def open_book(settings: dict[str, Any] = settings) -> AsyncRedisBook:
                    return AsyncRedisBook(kind_async_client(request, kind, client), **settings)

                got.append(run_async_steps(open_book, book, steps))
            got[-1] = as_json(got[-1])
    finally:
        delete_namespace(client, f"{base}-*")
        client.close()
    assert set(ASYNC_FALLBACKS) >= FALLEN_BACK
    assert_parity(f"{facade} {layout} ({name})", sequences, got, want)


@pytest.mark.parametrize("facade", FACADES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_facade_answers_as_the_memory_book(
    request: pytest.FixtureRequest, layout: str, facade: str
) -> None:
    check(request, layout, facade, SEED, SEQUENCES[layout])


KNOWN_AT_LENGTH = pytest.mark.xfail(
    strict=False,
    reason="issue 20, open: on several shards a new seed may meet an order read by the "
    "server's clock: list_tasks after a create_many (each shard numbers its part when it "
    "runs) and audit(None) under a limit (entries of one millisecond in several shards)",
)
"""What the long run can still meet on several shards (the short run holds every layout
strictly; one shard is strict at length too)."""
LONG_LAYOUTS = [
    pytest.param(layout, marks=KNOWN_AT_LENGTH) if shards > 1 else layout
    for layout, (_kind, shards) in LAYOUTS.items()
]


@pytest.mark.long
@pytest.mark.timeout(900)  # the Cluster's ten times 30 sequences: about two minutes alone
@pytest.mark.parametrize("facade", FACADES)
@pytest.mark.parametrize("layout", LONG_LAYOUTS)
def test_every_facade_answers_as_the_memory_book_at_length(
    request: pytest.FixtureRequest, layout: str, facade: str
) -> None:
    """Ten times as many sequences, from a new seed each run (the failure names it;
    ``ASYNCBOOK_PARITY_SEED`` replays it)."""
    seed = int(os.environ.get("ASYNCBOOK_PARITY_SEED") or time.time())
    check(request, layout, facade, seed, 10 * SEQUENCES[layout])


def test_the_asyncio_facade_has_the_whole_surface() -> None:
    """Every method the sequences call is ``AsyncRedisBook``'s own (issue 31: one
    surface)."""
    assert ASYNC_FALLBACKS == []
