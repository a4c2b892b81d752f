"""Canvas page time: what the server does for ``/canvas/<id>`` at 500 nodes.

    .venv/bin/python bench/bench_canvas.py [--redis-url URL] [--rounds 7] [--calls 10]

Seeds a canvas of 501 tasks (a root whose chain of 20 links each spawned 24 tasks, as
Celery records them: ``root_id``, ``parent_id``) and one of 51 (chain of 2, 24 each) in a
throwaway namespace, serves the book with a ``BackgroundServer`` on loopback, and times,
in interleaved rounds, what the canvas page asks for: ``GET /canvas/<id>`` (the page)
and ``GET /api/canvas/<id>/svg`` (the drawing, with the counts: its one read, again
every 2 s while members are open), and ``GET /api/canvas/<id>`` (the graph, JSON), for
both canvases, and ``GET /api/tasks/<root>`` as the yardstick. Prints per-request
medians and the ratios (501 nodes ÷ 51 nodes; the drawing ÷ one task read).
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

import httpx
from _servers import drop_keys

from asyncbook import PublishInfo, RedisBook
from asyncbook.web import BackgroundServer, feed_for

HOUR_MS = 3_600_000


def seed(book: RedisBook, p: str, chain: int, spawned: int) -> str:
    """A root whose chain of ``chain`` links each spawned ``spawned`` tasks; the root."""
    root, now = p + "root", book.now_ms()

    def create(task_id: str, parent: str | None, name: str) -> None:
        info = PublishInfo(name=name, queue="celery", root_id=root, parent_id=parent)
        book.create(id=task_id, now_ms=now, ttl_ms=HOUR_MS, max_attempts=1, info=info)

    create(root, None, "app.start")
    previous = root
    for n in range(chain):
        create(f"{p}c{n}", previous, "app.link")
        for k in range(spawned):
            create(f"{p}c{n}s{k}", f"{p}c{n}", "app.leaf")
        previous = f"{p}c{n}"
    return root


def per_call(client: httpx.Client, path: str, calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        answer = client.get(path)
        assert answer.status_code == 200, answer.text
    return (time.perf_counter() - started) / calls


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/13")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=10)
    args = parser.parse_args(argv)
    namespace = f"bench-canvas-{uuid.uuid4().hex[:8]}"
    book = RedisBook.from_url(args.redis_url, namespace=namespace)
    try:
        big, small = seed(book, "big-", 20, 24), seed(book, "small-", 2, 24)
        paths = {
            "page": "/canvas/" + big,
            "graph 501": "/api/canvas/" + big,
            "svg 501": f"/api/canvas/{big}/svg",
            "graph 51": "/api/canvas/" + small,
            "svg 51": f"/api/canvas/{small}/svg",
            "task": "/api/tasks/" + big,
        }
        times: dict[str, list[float]] = {name: [] for name in paths}
        with (
            BackgroundServer(book, feed_for(book)) as server,
            httpx.Client(base_url=server.url.rstrip("/"), timeout=60) as client,
        ):
            nodes = len(client.get(paths["graph 501"]).json()["nodes"])
            for _ in range(args.rounds):
                for name, path in paths.items():
                    times[name].append(per_call(client, path, args.calls))
        median = {name: statistics.median(values) for name, values in times.items()}
        print(f"{nodes} nodes (501 tasks and no group); medians of {args.rounds} rounds")
        for name, value in median.items():
            print(f"  GET {name:<10} {value * 1e3:8.2f} ms")
        reads = median["page"] + median["svg 501"]
        print(f"  canvas page at 500 nodes (page + svg): {reads * 1e3:.1f} ms")
        print(f"  ratio svg 501 / svg 51: {median['svg 501'] / median['svg 51']:.1f}")
        print(f"  ratio svg 501 / one task read: {median['svg 501'] / median['task']:.0f}")
    finally:
        drop_keys(book.client, "{" + namespace + "}:*")


if __name__ == "__main__":
    main()
