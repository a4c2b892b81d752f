"""Round trips and server commands per book call (issue 16: every key in KEYS).

Run on one code version, then on another, and compare the tables::

    .venv/bin/python bench/bench_script_keys.py --url redis://127.0.0.1:6379/12

A round trip is one packed send of the client (a pipeline is one); commands are what
``INFO commandstats`` counts on the server, EVAL/EVALSHA included, INFO itself not.
Each figure is the median over ``--rounds`` calls (after a warm-up: scripts loaded,
the server checked).
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import uuid
from collections.abc import Callable
from typing import Any

import redis
from _servers import drop_keys
from redis.connection import Connection

from asyncbook import PublishInfo, RedisBook

T0 = 1_800_000_000_000
HOUR = 3_600_000
NAMED = PublishInfo(name="resize", queue="q", parent_id="p")


class Counter:
    def __init__(self) -> None:
        self.trips = 0
        send: Any = Connection.send_packed_command

        def counted(connection: Connection, command: Any, check_health: bool = True) -> None:
            self.trips += 1
            send(connection, command, check_health)

        Connection.send_packed_command = counted  # type: ignore[method-assign]


def commands(stats: redis.Redis) -> int:
    info: dict[str, Any] = stats.info("commandstats")
    return sum(v["calls"] for k, v in info.items() if k != "cmdstat_info")


def measure(counter: Counter, stats: redis.Redis, call: Callable[[], object]) -> tuple[int, int]:
    before_commands = commands(stats)
    before_trips = counter.trips
    call()
    return counter.trips - before_trips, commands(stats) - before_commands


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default="redis://127.0.0.1:6379/12")
    parser.add_argument("--rounds", type=int, default=7)
    options = parser.parse_args()
    stats = redis.Redis.from_url(options.url)
    counter = Counter()
    namespace = f"bench-keys-{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(options.url)
    publisher = RedisBook(client, namespace=namespace)
    hinted = "name" in inspect.signature(RedisBook.apply_in_script).parameters
    script_source = (
        "local answers, missing = apply_events(KEYS, ARGV, 1)\n"
        "return missing or (answers and {'done', '', answers}) or {'!unknown'}"
    )
    key = "{" + namespace + "}:extra"
    results: dict[str, list[tuple[int, int]]] = {}

    def run(label: str, call: Callable[[], object]) -> None:
        results.setdefault(label, []).append(measure(counter, stats, call))

    done = {"type": "succeed", "atMs": T0 + 9, "resultRef": "r", "resultHash": "h"}

    def one_round(n: int) -> None:
        worker = RedisBook(client, namespace=namespace)  # a process that did not create
        script = worker.events_script(script_source)
        ids = [f"{n}-{i}" for i in range(6)]
        for task_id in ids[1:]:
            publisher.create(id=task_id, now_ms=T0, ttl_ms=HOUR, max_attempts=1, info=NAMED)
        worker.create(id="warm", now_ms=T0, ttl_ms=HOUR, max_attempts=1, exist_ok=True)
        worker.get("warm")
        run("create (named)", lambda: publisher.create(
            id=ids[0], now_ms=T0, ttl_ms=HOUR, max_attempts=1, info=NAMED))  # fmt: skip
        start = {"type": "start", "atMs": T0 + 1, "worker": "w1"}
        run("apply start, same book", lambda: publisher.apply(ids[0], start))
        run("apply succeed, same book", lambda: publisher.apply(ids[0], done))
        run("apply start, another book", lambda: worker.apply(ids[1], start))
        run("apply succeed, another book", lambda: worker.apply(ids[1], done))
        events = [(start, f"{n}:s"), (done, f"{n}:e")]
        extra: dict[str, Any] = {"name": "resize"} if hinted else {}
        run("execution (start+succeed), worker", lambda: worker.apply_in_script(
            ids[2], events, script, key, [], **extra))  # fmt: skip
        run("expire_many of 3, another book", lambda: worker.expire_many(ids[3:]))
        run("heartbeat", lambda: worker.heartbeat(ids[:1]))
        run("search page", lambda: worker.search(limit=20))
        run("workers", lambda: worker.workers())
        run("stats (1 h)", lambda: worker.stats(window_ms=HOUR))

    for n in range(options.rounds + 1):
        one_round(n)
    print(f"| call | round trips | commands |  (median of {options.rounds}, after warm-up)")
    print("|---|---|---|")
    for label, rows in results.items():
        rows = rows[1:]
        trips = statistics.median(r[0] for r in rows)
        cmds = statistics.median(r[1] for r in rows)
        print(f"| {label} | {trips:g} | {cmds:g} |")
    drop_keys(client, "{" + namespace + "}:*")


if __name__ == "__main__":
    main()
