"""Real Celery canvases, run by a worker, drawn as graphs: a chain, a group, a chord and a
task that spawns tasks, each read back from any of its tasks (``read_canvas``)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import VERSION, Celery, Task, chain, chord, group
from celery.result import GroupResult

from asyncbook import RedisBook
from asyncbook._canvas import Canvas
from asyncbook.web._canvas_api import read_canvas

from ..support.books import delete_namespace
from ..support.celery import CELERY_URL as URL
from ..support.celery import close_result_backend, memory_app, threaded_worker, unique, wait_for

CELERY = (VERSION.major, VERSION.minor)

pytestmark = [
    pytest.mark.redis,
    pytest.mark.timeout(90),
    pytest.mark.filterwarnings("ignore:Call to deprecated setex:DeprecationWarning"),
]


@pytest.fixture
def book() -> Iterator[RedisBook]:
    namespace = unique("canvas")
    book = RedisBook.from_url(URL, namespace=namespace)
    yield book
    delete_namespace(book.client, namespace)
    book.client.close()


@pytest.fixture
def app() -> Iterator[Celery]:
    app = memory_app("canvas", backend=URL, result_backend_thread_safe=True, result_expires=600)

    @app.task(shared=False, tracked=True, ttl=60, name="canvas.add")
    def add(x: int, y: int = 1) -> int:
        return x + y

    @app.task(shared=False, tracked=True, ttl=60, name="canvas.total")
    def total(values: list[int]) -> int:
        return sum(values)

    @app.task(bind=True, shared=False, tracked=True, ttl=60, name="canvas.spawn")
    def spawn(self: Task[Any, Any], n: int) -> int:
        for i in range(n):
            add.delay(i)
        return n

    yield app
    close_result_backend(app)
    app.close()
    client = redis.Redis.from_url(URL)
    for key in client.scan_iter(match="celery-task-meta-*", count=1000):
        client.delete(key)
    client.close()


def settled(book: RedisBook, task_id: str, members: int) -> Canvas:
    """The canvas of ``task_id`` once it has ``members`` tasks, every one succeeded."""

    async def read() -> Canvas | None:
        reader = book.async_twin()
        assert reader is not None
        try:
            return await read_canvas(reader, task_id)
        finally:
            await reader.aclose()

    def done() -> Canvas | None:
        canvas = asyncio.run(read())
        if canvas is None or canvas.counts["succeeded"] != members:
            return None
        return canvas

    found: Canvas = wait_for(done, timeout=30)
    return found


def kinds(canvas: Canvas) -> list[str]:
    return sorted(edge.kind for edge in canvas.edges)


def test_chain_group_chord_and_spawned_tasks_are_drawn(app: Celery, book: RedisBook) -> None:
    add, total, spawn = (app.tasks[f"canvas.{n}"] for n in ("add", "total", "spawn"))
    with threaded_worker(app, book):
        links = chain(add.s(1), add.s(), add.s()).apply_async()
        members = group(add.s(i) for i in range(3)).apply_async()
        assert isinstance(members, GroupResult)
        assert members.results
        callback = chord([add.s(i) for i in range(3)], total.s()).apply_async()
        parent = spawn.delay(2)

        # A chain, from its last link: root, then each link spawned by the one before.
        canvas = settled(book, links.id, 3)
        columns = {node.id: node.column for node in canvas.nodes}
        assert sorted(columns.values()) == [0, 1, 2]
        assert columns[links.id] == 2
        assert kinds(canvas) == ["spawned", "spawned"]

        # A group, from any member: its node, then the members.
        canvas = settled(book, members.results[1].id, 3)
        assert [n.kind for n in canvas.nodes].count("group") == 1
        assert kinds(canvas) == ["member"] * 3

        # A chord: the header's group, then the callback its last member sent.
        canvas = settled(book, callback.id, 4)
        if CELERY < (5, 6):  # Celery 5.5 gives the callback no group id: spawned by it
            assert kinds(canvas) == ["member", "member", "member", "spawned"]
            [edge] = [edge for edge in canvas.edges if edge.kind == "spawned"]
        else:
            assert kinds(canvas) == ["callback", "member", "member", "member"]
            [edge] = [edge for edge in canvas.edges if edge.kind == "callback"]
        assert edge.target == callback.id
        names = {node.id: node.name for node in canvas.nodes}
        assert names[callback.id] == "canvas.total"
        assert (
            max(n.column for n in canvas.nodes)
            == {n.id: n.column for n in canvas.nodes}[callback.id]
        )

        # A task that spawned two.
        canvas = settled(book, parent.id, 3)
        assert canvas.root_id == parent.id
        assert kinds(canvas) == ["spawned", "spawned"]
        assert {n.column for n in canvas.nodes if n.id != parent.id} == {1}
