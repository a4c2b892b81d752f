"""What a smaller task hash would save a write: the record read and written by a script,
today's hash (one field a number, 16 fields) against the numbers packed in one field
(6 fields), counted by callgrind on a private ``redis-server``.

Run (needs valgrind and redis-server)::

    .venv/bin/python bench/bench_record_read.py [-n 500]

Each call reads the record as ``load_task`` (``_task.lua``) does (an ``HMGET`` and a
table; packed: an ``HMGET`` of 8 fields and one ``string.match``), then writes a
succeed's changes (today: an ``HSET`` of four fields; packed: the numbers field again).
Rounds alternate between the two layouts; each layout's tasks are fresh hashes of a
started task's fields, as the plain life of ``bench_peers.py`` leaves them.
"""

from __future__ import annotations

import argparse

import redis
from bench_peers_instructions import callgrind

TASK_ID = '"ca603980-ef3f-4c6b-9b88-dbd682cf31a2"'
TODAY = {
    "id": TASK_ID, "st": "running", "exp": "1796665460317", "att": "1", "max": "4",
    "prog": "0", "ver": "1", "seq": "1", "hbt": "60000", "rdl": "0", "c": "1796661860317",
    "n": "resize", "q": "celery", "i": "1", "s": "1796661860318", "w": "celery@bench",
}  # fmt: skip
PACKED = {
    "id": TASK_ID, "r": "running|1796665460317|1|4|0|1|1|60000|0|1796661860317|1796661860318|",
    "n": "resize", "q": "celery", "i": "1", "w": "celery@bench",
}  # fmt: skip
READ_TODAY = """
local f = redis.call('HMGET', KEYS[1], 'id', 'st', 'exp', 'att', 'max', 'prog', 'ver', 'seq',
  'err', 'hbt', 'rdl', 'gk', 'gid', 'n', 's', 'w', 'i')
local t = {id = f[1], st = f[2], exp = f[3], att = tonumber(f[4]), max = tonumber(f[5]),
  prog = tonumber(f[6]), ver = tonumber(f[7]), seq = f[8], err = f[9], hbt = tonumber(f[10]),
  rdl = f[11], gk = f[12], gid = f[13], n = f[14], s = f[15], w = f[16], i = f[17]}
redis.call('HSET', KEYS[1], 'st', 'succeeded', 'prog', '100', 'ver', '2', 'e', '1796661860320')
return 1
"""
READ_PACKED = """
local f = redis.call('HMGET', KEYS[1], 'id', 'r', 'err', 'gk', 'gid', 'n', 'w', 'i')
local st, exp, att, max, prog, ver, seq, hbt, rdl, c, s, e = string.match(f[2],
  '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)$')
local t = {id = f[1], st = st, exp = exp, att = tonumber(att), max = tonumber(max),
  prog = tonumber(prog), ver = tonumber(ver), seq = seq, err = f[3], hbt = tonumber(hbt),
  rdl = rdl, gk = f[4], gid = f[5], n = f[6], s = s, w = f[7], i = f[8]}
redis.call('HSET', KEYS[1], 'r', table.concat({'succeeded', exp, att, max, '100', '2', seq, hbt,
  rdl, c, s, '1796661860320'}, '|'))
return 1
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=500, help="calls per layout and round")
    parser.add_argument("--rounds", type=int, default=2)
    options = parser.parse_args()
    n, rounds = options.n, options.rounds
    layouts = [("today: 16 fields", TODAY, READ_TODAY), ("packed: 6 fields", PACKED, READ_PACKED)]
    with callgrind("--hz", "1") as grind:
        client = redis.Redis.from_url(grind.url)
        print(f"{n} calls; instructions in Redis per call (read, then a succeed's write)\n")
        print("| round | " + " | ".join(name for name, _, _ in layouts) + " |")
        print("|---|---|---|")
        for round_ in range(1, rounds + 1):
            counts = []
            for name, fields, script in layouts:
                sha = client.script_load(script)
                keys = [f"t:{name[:5]}:{round_}:{i}" for i in range(n)]
                for key in keys:
                    client.hset(key, mapping=fields)  # type: ignore[arg-type]
                client.evalsha(sha, 1, keys[0])  # type: ignore[no-untyped-call]

                def run(sha: str = sha, keys: list[str] = keys) -> None:
                    for key in keys:
                        client.evalsha(sha, 1, key)  # type: ignore[no-untyped-call]

                counts.append(grind.count(run) / n)
                client.delete(*keys)
            print(f"| {round_} | " + " | ".join(f"{c:,.0f}" for c in counts) + " |", flush=True)
        client.close()


if __name__ == "__main__":
    main()
