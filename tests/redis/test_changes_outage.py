"""The change feeds while their Redis is down: one WARNING per outage, not one a retry."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import pytest
import redis
import redis.asyncio

from asyncbook.redis import follow_changes
from asyncbook.redis._changes import changes

from ..support.servers import free_port


def _dead_url() -> str:
    return f"redis://127.0.0.1:{free_port()}/0"  # nobody listens


def test_a_lost_change_feed_warns_once_per_outage(caplog: pytest.LogCaptureFixture) -> None:
    client = redis.Redis.from_url(_dead_url(), socket_connect_timeout=0.2)
    ends = time.monotonic() + 1.0
    lost: list[Exception] = []
    with caplog.at_level(logging.DEBUG, "asyncbook.redis"):
        follow_changes(
            client,
            "ch",
            lambda _: None,
            lambda: None,
            stop=lambda: time.monotonic() > ends,
            max_backoff=0.1,
            on_reconnect=lost.append,
        )
    records = [record for record in caplog.records if "change feed lost" in record.getMessage()]
    assert len(lost) >= 3
    assert len(records) == len(lost)
    assert [record.levelno for record in records] == [logging.WARNING] + [logging.DEBUG] * (
        len(records) - 1
    )
    client.close()


def test_a_lost_asyncio_change_feed_warns_once_per_outage(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def follow() -> int:
        client = redis.asyncio.Redis.from_url(_dead_url(), socket_connect_timeout=0.2)
        lost: list[Exception] = []
        feed = changes(client, "ch", max_backoff=0.1, on_reconnect=lost.append)
        async with contextlib.aclosing(feed):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(feed.__anext__(), 1.0)
        await client.aclose()
        return len(lost)

    with caplog.at_level(logging.DEBUG, "asyncbook.redis"):
        lost = asyncio.run(follow())
    records = [record for record in caplog.records if "change feed lost" in record.getMessage()]
    assert lost >= 3
    assert [record.levelno for record in records] == [logging.WARNING] + [logging.DEBUG] * (
        len(records) - 1
    )
