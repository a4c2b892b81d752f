"""Floors of a task's life in Redis instructions (callgrind), for issue 32's levers.

Run (needs valgrind):  .venv/bin/python bench/bench_write_floor.py [-n 300]

1. Packed arguments: EVALSHA of ``return 1`` with 14 KEYS and 40 ARGV, against the same
   KEYS and one msgpack argument unpacked by Lua's ``cmsgpack`` (and not unpacked), so the
   cost of an argument and of unpacking it show side by side.
2. The contract alone: a life (create, start, succeed) as three EVALSHAs that only write
   what the contract needs (the record with a version check, its history, the callback
   marker, the deadline, the outbox entry at the end), with the transition computed by the
   caller: the least the write path can cost, to set beside BullMQ's life
   (``bench_peers_instructions.py``).
"""

from __future__ import annotations

import argparse
import json
import struct
import time
import uuid

import redis
from bench_peers_instructions import Callgrind, callgrind

CREATE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'st', 'queued', 'ver', '1', 'att', '0', 'max', ARGV[1], 'exp',
  ARGV[2], 'c', ARGV[3], 'n', ARGV[4], 'q', ARGV[5], 'seq', ARGV[6])
redis.call('RPUSH', KEYS[2], ARGV[7])
redis.call('ZADD', KEYS[3], ARGV[2], ARGV[8])
return 1
"""
COMMIT = """
local ver = redis.call('HGET', KEYS[1], 'ver')
if ver ~= ARGV[1] then return {0, ver} end
if redis.call('EXISTS', KEYS[4]) == 1 then return {2} end
redis.call('HSET', KEYS[1], 'st', ARGV[2], 'ver', ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7])
redis.call('RPUSH', KEYS[2], ARGV[8])
redis.call('SET', KEYS[4], '1', 'PX', ARGV[9])
if ARGV[10] == '1' then
  redis.call('ZREM', KEYS[3], ARGV[11])
  redis.call('PEXPIRE', KEYS[1], ARGV[9])
  redis.call('PEXPIRE', KEYS[2], ARGV[9])
  redis.call('XADD', KEYS[5], '*', 'taskId', ARGV[11], 'state', ARGV[2], 'atMs', ARGV[12],
    'version', ARGV[3])
  redis.call('XTRIM', KEYS[5], 'MINID', '0')
end
return {1}
"""


def msgpack_strings(items: list[str]) -> bytes:
    """A msgpack array of short strings (bench only: array 16, str 8)."""
    out = bytearray(b"\xdc" + struct.pack(">H", len(items)))
    for item in items:
        data = item.encode()
        out += b"\xd9" + bytes([len(data)]) + data
    return bytes(out)


def packed_args(grind: Callgrind, client: redis.Redis, n: int) -> None:
    keys = [f"{{ns}}:k:{i}" for i in range(14)]
    args = [f"arg-value-{i:03d}-some-text" for i in range(40)]
    packed = msgpack_strings(args)
    cases = [
        ("return 1, 14 KEYS + 40 ARGV", "return 1", args),
        ("cmsgpack.unpack of one ARGV", "local a = {cmsgpack.unpack(ARGV[1])} return 1", [packed]),
        ("return 1, 14 KEYS + 1 ARGV", "return 1", [packed]),
    ]
    for label, source, sent in cases:
        sha = client.script_load(source)
        client.evalsha(sha, len(keys), *keys, *sent)
        count = grind.count(lambda: [client.evalsha(sha, 14, *keys, *sent) for _ in range(n)])  # noqa: B023
        print(f"| {label} | {count / n:,.0f} |")


def contract_life(grind: Callgrind, client: redis.Redis, n: int) -> None:
    create, commit = client.script_load(CREATE), client.script_load(COMMIT)
    ttl = "86400000"

    def life() -> None:
        task, now = str(uuid.uuid4()), str(int(time.time() * 1000))
        record, history = f"{{ns}}:t:{task}", f"{{ns}}:h:{task}"
        shared = [record, history, "{ns}:deadlines"]
        created = json.dumps({"type": "create", "atMs": int(now)})
        client.evalsha(
            create, 3, *shared, "4", now, now, "bench.task", "celery", "17", created, task
        )
        started = json.dumps({"type": "start", "atMs": int(now), "worker": "celery@bench"})
        client.evalsha(
            commit, 5, *shared, f"{{ns}}:cb:{task}:s", "{ns}:outbox",
            "1", "running", "2", "w", "celery@bench", "s", now, started, ttl, "0", task, now,
        )  # fmt: skip
        done = json.dumps({"type": "succeed", "atMs": int(now), "resultRef": "meta-x"})
        client.evalsha(
            commit, 5, *shared, f"{{ns}}:cb:{task}:ok", "{ns}:outbox",
            "2", "succeeded", "3", "e", now, "att", "1", done, ttl, "1", task, now,
        )  # fmt: skip

    life()
    count = grind.count(lambda: [life() for _ in range(n)])
    print(f"| the contract alone, one life (create, start, succeed) | {count / n:,.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=300, help="calls (lives) per measure")
    options = parser.parse_args()
    with callgrind() as grind:
        client = redis.Redis.from_url(grind.url)
        try:
            print("| measure | instructions in Redis |\n|---|---|")
            packed_args(grind, client, options.n)
            contract_life(grind, client, options.n)
        finally:
            client.close()


if __name__ == "__main__":
    main()
