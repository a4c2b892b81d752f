"""Results by reference: writing and reading back (checked) a result in each store, and
what a read does to an asyncio event loop.

Run:  .venv/bin/python bench/bench_artifacts.py

A local directory (a temporary one) and moto's S3-compatible server on a free loopback
port (started and stopped by PID, as the tests do). For 1 MB and 20 MB: ``put`` and
``read`` (fetched and checked against its sha256), medians of 5 rounds. Then the event
loop's worst lateness (a 1 ms ticker) while a 20 MB result is read with ``read`` called
on the loop against ``await aread`` (a thread).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from asyncbook.artifacts import ArtifactStore, LocalStore, S3Store, aread, digest_of, key_for, read
from tests.support.s3 import s3_server

ROUNDS = 5
SIZES = (1 << 20, 20 << 20)


def median_ms(action: Callable[[], object]) -> float:
    times = []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        action()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def roundtrip(name: str, store: ArtifactStore) -> None:
    for size in SIZES:
        data = bytes(range(256)) * (size // 256)
        digest = digest_of(data)
        key = key_for("bench", f"t-{size}", digest)
        ref = store.put(key, data, "application/octet-stream")
        put = median_ms(partial(store.put, key, data, "application/octet-stream"))
        got = median_ms(partial(read, store, ref, digest))
        print(f"| {name} | {size >> 20} MB | {put:.0f} ms | {got:.0f} ms |")


async def lateness(store: ArtifactStore, ref: str, digest: str, threaded: bool) -> float:
    worst = 0.0
    done = False

    async def tick() -> None:
        nonlocal worst
        while not done:
            due = time.perf_counter() + 0.001
            await asyncio.sleep(0.001)
            worst = max(worst, time.perf_counter() - due)

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0.01)
    if threaded:
        await aread(store, ref, digest)
    else:
        read(store, ref, digest)
    await asyncio.sleep(0.01)
    done = True
    await ticker
    return worst * 1000


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        print("| store | size | put | read (checked) |\n|---|---|---|---|")
        roundtrip("local directory", LocalStore(Path(folder) / "store"))
        with s3_server(Path(folder) / "moto.log") as s3:
            store = S3Store(f"s3://{s3.bucket()}/bench", s3.options)
            roundtrip("S3 (moto on loopback)", store)
            data = bytes(range(256)) * (SIZES[-1] // 256)
            digest = digest_of(data)
            ref = store.put(key_for("bench", "loop", digest), data, "application/octet-stream")
            on_loop = [asyncio.run(lateness(store, ref, digest, False)) for _ in range(ROUNDS)]
            threaded = [asyncio.run(lateness(store, ref, digest, True)) for _ in range(ROUNDS)]
            print(
                f"\nworst event-loop lateness while 20 MB is read from S3: read() on the loop "
                f"{statistics.median(on_loop):.0f} ms, await aread() "
                f"{statistics.median(threaded):.1f} ms (medians of {ROUNDS})"
            )


if __name__ == "__main__":
    main()
