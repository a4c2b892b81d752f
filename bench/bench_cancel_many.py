"""A canvas cancel: ``cancel_many`` against one audited cancel per member (issue 34).

Run:  .venv/bin/python bench/bench_cancel_many.py [--url redis://127.0.0.1:6379/13]
      [-n 2000] [--rounds 6]

``n`` queued tasks are cancelled through an ``AsyncRedisBook`` (the status server's
reader), audited, on one shard and on four, two ways interleaved round by round (forward,
then backward): ``each``, what the canvas cancel did before (``cancel(..., actor=...)``
per member, 16 at a time), and ``many``, what it does now (one ``cancel_many``: one
cancel_many.lua call per shard). Reported: the median time of each and the median of the
per-round ratios (each ÷ many).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from pathlib import Path

import redis
import redis.asyncio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from _servers import drop_keys  # noqa: E402

from asyncbook import CreateSpec  # noqa: E402
from asyncbook.redis import AsyncRedisBook  # noqa: E402

AT_ONCE = 16


async def each(book: AsyncRedisBook, ids: list[str]) -> None:
    for at in range(0, len(ids), AT_ONCE):
        part = ids[at : at + AT_ONCE]
        await asyncio.gather(*(book.cancel(i, "bench", actor="bench") for i in part))


async def many(book: AsyncRedisBook, ids: list[str]) -> None:
    await book.cancel_many(ids, actor="bench", reason="bench")


async def one_run(url: str, shards: int, n: int, way: str) -> float:
    namespace = f"bench-cm-{uuid.uuid4().hex[:8]}"
    client = redis.asyncio.Redis.from_url(url)
    try:
        async with AsyncRedisBook(client, namespace=namespace, shards=shards) as book:
            ids = [f"t{k}" for k in range(n)]
            now = await book.now_ms()
            for at in range(0, n, 500):
                await book.create_many(
                    [CreateSpec(i, now, 3_600_000, 1) for i in ids[at : at + 500]]
                )
            started = time.perf_counter()
            await (each if way == "each" else many)(book, ids)
            took = time.perf_counter() - started
            assert (await book.count_by_state())["cancelled"] == n
            return took
    finally:
        await client.aclose()
        drop_keys(redis.Redis.from_url(url), "{" + namespace + "*")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--url", default="redis://127.0.0.1:6379/13")
    parser.add_argument("-n", type=int, default=2000, help="members cancelled per run")
    parser.add_argument("--rounds", type=int, default=6, help="an even number")
    args = parser.parse_args()
    for shards in (1, 4):
        times: dict[str, list[float]] = {"each": [], "many": []}
        ratios: list[float] = []
        for round_ in range(args.rounds):
            ways = ["each", "many"] if round_ % 2 == 0 else ["many", "each"]
            took = {way: asyncio.run(one_run(args.url, shards, args.n, way)) for way in ways}
            for way, seconds in took.items():
                times[way].append(seconds)
            ratios.append(took["each"] / took["many"])
        each_ms = statistics.median(times["each"]) * 1000
        many_ms = statistics.median(times["many"]) * 1000
        print(
            f"shards={shards} n={args.n}: each {each_ms:.0f} ms, many {many_ms:.0f} ms, "
            f"each/many median ratio {statistics.median(ratios):.1f}"
        )


if __name__ == "__main__":
    main()
