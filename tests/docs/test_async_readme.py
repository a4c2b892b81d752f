"""The FastAPI example of docs/redis.md answers over HTTP (httpx's ASGI transport, its
lifespan run), reading a task the workers' book wrote."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from asyncbook import RedisBook, StartEvent, SucceedEvent

from ..support.snippets import snippet, snippets_db

FASTAPI_BLOCK, FASTAPI_PAGE = snippet('namespace="readme-api"')


@pytest.fixture
def workers() -> Iterator[RedisBook]:
    """The workers' side of the example's namespace (db 0, as the example says)."""
    with snippets_db() as client:
        yield RedisBook(client, namespace="readme-api")


def test_the_fastapi_example_reads_and_waits_for_a_task(workers: RedisBook) -> None:
    example: dict[str, Any] = {"__name__": "readme"}
    exec(compile(FASTAPI_BLOCK, str(FASTAPI_PAGE), "exec"), example)
    app = example["app"]
    workers.create(id="job-9", now_ms=0, ttl_ms=3_600_000, max_attempts=1)

    async def scenario() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://api") as http,
        ):
            found = await http.get("/jobs/job-9")
            missing = await http.get("/jobs/nobody")
            late = await http.get("/jobs/job-9/result", params={"timeout": 0.2})

            async def finish() -> None:
                await asyncio.sleep(0.1)
                await asyncio.to_thread(workers.apply, "job-9", StartEvent(at_ms=1, worker="w"))
                done = SucceedEvent(at_ms=2, result_ref="r", result_hash="h")
                await asyncio.to_thread(workers.apply, "job-9", done)

            finishing = asyncio.create_task(finish())
            waited = await http.get("/jobs/job-9/result", params={"timeout": 10})
            await finishing
            return [found, missing, late, waited]

    found, missing, late, waited = asyncio.run(scenario())
    assert found.status_code == 200
    assert found.json() == {"id": "job-9", "state": "queued", "progress": 0}
    assert missing.status_code == 404
    assert late.status_code == 504
    assert "'job-9'" in late.json()["detail"]
    assert waited.status_code == 200
    assert waited.json() == {"id": "job-9", "state": "succeeded", "error": None}
