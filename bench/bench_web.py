"""Status server benchmarks (not run by CI): SSE fan-out and snapshot lookups.

    .venv/bin/python bench/bench_web.py [--watchers 500] [--tasks 10] [--steps 50]
        [--redis-url URL]

Starts a private ``redis-server`` on a free loopback port (so nothing else's traffic is
counted; ``--redis-url`` uses an existing one instead), then ``asyncbook serve`` in its
own process over a fresh namespace, and measures, from this process:

1. fan-out: ``--watchers`` SSE streams spread over ``--tasks`` tasks while a driver
   process moves every task through start, ``--steps`` progress events and success.
   Checks that every watcher saw every version in order; reports the delay from a
   change (the driver's write returned) to its delivery to a watcher (p50/p99/max).
2. idle cost: Redis commands per second while nothing changes, with 0 watchers and
   with all of them connected (INFO's total_commands_processed; the INFO calls
   themselves are subtracted).
3. snapshot lookups: ``GET /api/tasks/{id}`` requests/s and p50/p99 latency at 1 and
   50 concurrent clients.

Everything runs on loopback; every loop is bounded in count and time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import redis
from _servers import drop_keys, free_port, redis_at, stop_process

from asyncbook import ProgressEvent, RedisBook, StartEvent, SucceedEvent
from asyncbook.web._paths import task_path

NOW = 1_000_000


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def start_server(url: str, namespace: str, port: int) -> subprocess.Popen[bytes]:
    env = dict(os.environ, ASYNCBOOK_REDIS_URL=url, ASYNCBOOK_NAMESPACE=namespace)
    command = [sys.executable, "-m", "asyncbook.cli", "serve", "--port", str(port)]
    command += ["--log-level", "warning"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=1)
            return process
        except httpx.HTTPError:
            time.sleep(0.1)
    process.kill()
    raise SystemExit("the server did not start")


def drive(
    url: str, namespace: str, tasks: list[str], steps: int, interval: float, out: Any
) -> None:
    """Driver process: advance every task step by step; report when each version landed."""
    book = RedisBook.from_url(url, namespace=namespace)
    landed: dict[str, dict[int, float]] = {task: {} for task in tasks}
    version = 0

    def step(task: str, event: Any) -> None:
        result = book.apply(task, event)
        landed[task][result.task.version] = time.time()

    for task in tasks:
        step(task, StartEvent(at_ms=NOW + 1, worker="bench"))
    for i in range(1, steps + 1):
        time.sleep(interval)
        for task in tasks:
            step(task, ProgressEvent(at_ms=NOW + 1 + i, progress=i * 100 // steps, cursor=str(i)))
        version = i + 1
    time.sleep(interval)
    for task in tasks:
        step(task, SucceedEvent(at_ms=NOW + steps + 10, result_ref="r", result_hash="h"))
    out.put((landed, version + 1))


async def open_get(port: int, path: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A raw keep-alive HTTP/1.1 connection with a GET sent (httpx's pool, not the server,
    limits throughput at 50 connections and skews stream timings at 500)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    return reader, writer


async def sse_events(reader: asyncio.StreamReader) -> AsyncIterator[tuple[str, str]]:
    """(event, data) pairs from a chunked text/event-stream response."""
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    buffer = b""
    while True:
        size = int((await reader.readuntil(b"\r\n")).strip(), 16)
        if size == 0:
            return
        buffer += (await reader.readexactly(size + 2))[:-2]
        while b"\n\n" in buffer:
            block, buffer = buffer.split(b"\n\n", 1)
            fields = dict(
                line.split(": ", 1) for line in block.decode().split("\n") if ": " in line
            )
            if "event" in fields:
                yield fields["event"], fields.get("data", "")


async def watch(port: int, task: str, seen: list[tuple[int, float]], ready: Any) -> None:
    """One SSE watcher: record (version, arrival time) of every change it is sent."""
    reader, writer = await open_get(port, task_path(task, "stream"))
    try:
        ready()
        async for event, data in sse_events(reader):
            if event == "change":
                seen.append((json.loads(data)["version"], time.time()))
            elif event == "snapshot":
                for entry in json.loads(data)["history"]:
                    seen.append((entry["version"], float("nan")))
            elif event == "end":
                return
    finally:
        writer.close()


def redis_commands(client: redis.Redis) -> int:
    return int(client.info("stats")["total_commands_processed"])


def idle_rate(client: redis.Redis, seconds: float) -> float:
    """Commands per second on the Redis over ``seconds``, less our own two INFO calls."""
    before = redis_commands(client)
    time.sleep(seconds)
    after = redis_commands(client)
    return max(0, after - before - 1) / seconds


async def fan_out(port: int, url: str, namespace: str, args: argparse.Namespace) -> dict[str, Any]:
    book = RedisBook.from_url(url, namespace=namespace)
    admin = redis.Redis.from_url(url)
    tasks = [f"bench-{i}" for i in range(args.tasks)]
    for task in tasks:
        book.create(id=task, now_ms=NOW, ttl_ms=10**12, max_attempts=1)
    idle_without = idle_rate(admin, args.idle_seconds)
    seen: list[list[tuple[int, float]]] = [[] for _ in range(args.watchers)]
    opened = 0

    def ready() -> None:
        nonlocal opened
        opened += 1

    watchers = [
        asyncio.create_task(watch(port, tasks[i % len(tasks)], seen[i], ready))
        for i in range(args.watchers)
    ]
    deadline = time.monotonic() + 60
    while (opened < args.watchers or hub_watchers(port) < args.watchers) and (
        time.monotonic() < deadline
    ):
        await asyncio.sleep(0.1)
    idle_with = await asyncio.to_thread(idle_rate, admin, args.idle_seconds)
    out: Any = multiprocessing.get_context("spawn").Queue()
    driver = multiprocessing.get_context("spawn").Process(
        target=drive, args=(url, namespace, tasks, args.steps, args.interval, out)
    )
    started = time.monotonic()
    driver.start()
    await asyncio.wait_for(asyncio.gather(*watchers), timeout=120)
    landed, last_version = await asyncio.to_thread(out.get, True, 60)
    driver.join(10)
    elapsed = time.monotonic() - started
    in_order = all(
        [version for version, _ in seen[i]] == list(range(1, last_version + 1))
        for i in range(args.watchers)
    )
    delays = [
        (arrived - landed[tasks[i % len(tasks)]][version]) * 1000
        for i in range(args.watchers)
        for version, arrived in seen[i]
        if arrived == arrived  # a snapshot's entries have no arrival time of their own
    ]
    admin.close()
    return {
        "watchers": args.watchers,
        "tasks": args.tasks,
        "versions_per_task": last_version,
        "changes_per_s": round(args.tasks / args.interval),
        "deliveries": len(delays),
        "every_watcher_saw_every_version_in_order": in_order,
        "delay_ms_p50": round(percentile(delays, 0.50), 1),
        "delay_ms_p99": round(percentile(delays, 0.99), 1),
        "delay_ms_max": round(max(delays), 1),
        "run_seconds": round(elapsed, 1),
        "idle_redis_commands_per_s_0_watchers": round(idle_without, 2),
        f"idle_redis_commands_per_s_{args.watchers}_watchers": round(idle_with, 2),
    }


async def lookups(port: int, task: str, concurrency: int, seconds: float) -> dict[str, Any]:
    latencies: list[float] = []
    stop = time.monotonic() + seconds
    request = f"GET {task_path(task)} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()

    async def worker() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while time.monotonic() < stop:
            begun = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200"), head
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            await reader.readexactly(length)
            latencies.append((time.perf_counter() - begun) * 1000)
        writer.close()

    started = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.monotonic() - started
    return {
        "concurrency": concurrency,
        "requests": len(latencies),
        "requests_per_s": round(len(latencies) / elapsed),
        "latency_ms_p50": round(statistics.median(latencies), 2),
        "latency_ms_p99": round(percentile(latencies, 0.99), 2),
    }


def hub_watchers(port: int) -> int:
    """Open task streams, as the server's /metrics reports them."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    return int(float(text.split("\nasyncbook_stream_watchers ")[1].split()[0]))  # "10.0"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--redis-url", default=None, help="Default: a private redis-server.")
    parser.add_argument("--watchers", type=int, default=500)
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--interval", type=float, default=0.02, help="Seconds between steps.")
    parser.add_argument("--idle-seconds", type=float, default=5.0)
    parser.add_argument("--lookup-seconds", type=float, default=5.0)
    args = parser.parse_args()
    with redis_at(args.redis_url) as url:
        run(args, url)


def run(args: argparse.Namespace, url: str) -> None:
    namespace = f"bench-web-{uuid.uuid4().hex[:8]}"
    port = free_port()
    server = start_server(url, namespace, port)
    try:
        report = {"fan_out": asyncio.run(fan_out(port, url, namespace, args))}
        report["lookups"] = [
            asyncio.run(lookups(port, "bench-0", n, args.lookup_seconds)) for n in (1, 50)
        ]
        print(json.dumps(report, indent=2))
    finally:
        stop_process(server)
        admin = redis.Redis.from_url(url)
        drop_keys(admin, "{" + namespace + "}:*")
        admin.close()


if __name__ == "__main__":
    main()
