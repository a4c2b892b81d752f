"""Layout G's indexer, prototyped (issue 32): memory per task of the real book indexed
into G's keys, and the indexer's Redis instructions per life against today's, by callgrind.

Run:  cd bench && PYTHONPATH=.. ../.venv/bin/python bench_layout_indexer.py [--tasks 10000] [-n 200]

A prototype, not the build (docs/benchmarks.md, "Layout G: a prototype of its indexer"):
the real book writes ``celery_life``'s five events per task (``bench_redis_book.py``), then
one of two indexers drains its change stream. ``today``: ``_Batch`` and index.lua's ops,
as ``catch_up_index`` applies them. ``G``: the same ops, except that a state index's
member goes to ``ib:<state>:<seq // 128 in base 36>`` (arithmetic buckets, a counts hash
``ic``), and a sort index's member, the task's creation order in base 36, to the bucket of
its directory ``bd:<field>`` whose lower bound is the last at or below '<score as 14 hex
digits>:<member>' (a lex directory: ties split), named ``bb:<field>:<lower bound>``; a
bucket past 128 members is rewritten as two (so each is a listpack again). Where a build
would differ: the prototype's script derives the bucket keys on the shard's tag (a build
names them in KEYS: the caller looks up the buckets first), and the old sort value a
removal needs comes from a dict here (a build carries it in the change entry). Both
indexers run as EVAL of their script, so their counts compare.
"""

from __future__ import annotations

import argparse
import bisect
import uuid
from datetime import timedelta
from typing import Any

import redis
from _servers import throwaway_redis
from bench_memory_layouts import base36, used_memory
from bench_peers_instructions import callgrind
from bench_redis_book import celery_life

from asyncbook import RedisBook
from asyncbook.redis._indexer import BATCH, _Batch
from asyncbook.redis._scripts import _lua
from asyncbook.redis._shard import Shard

T0 = 1_700_000_000_000
FILL = 128
"""A state index bucket's span of creation orders."""
SORT_FILL = 128
"""A sort index bucket splits past this many members (--sort-fill)."""

BUCKETS_LUA = """
-- The bucket of a sort index (directory dir, keys prefix..bound) at or below (score,
-- member); the first bucket's bound is '0' (below every '<hex>:<member>').
local function bucket_of(dir, prefix, score, member)
  local at = string.format('%014x', math.floor(tonumber(score))) .. ':' .. member
  local found = redis.call('ZREVRANGEBYLEX', dir, '[' .. at, '-', 'LIMIT', 0, 1)
  if not found[1] then
    redis.call('ZADD', dir, 0, '0')
    return prefix .. '0'
  end
  return prefix .. found[1]
end

-- A bucket past FILL members rewritten as ceil(n / FILL) buckets of equal shares, each
-- a new listpack; the first keeps the key, the others are named by their lower bound.
local function split(dir, prefix, key)
  local rows = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
  local n = #rows / 2
  local parts = math.ceil(n / FILL)
  local share = math.ceil(n / parts)
  redis.call('DEL', key)
  for part = 0, parts - 1 do
    local from, to = 2 * part * share + 1, math.min(#rows, 2 * (part + 1) * share)
    local target = key
    if part > 0 then
      local bound = string.format('%014x', math.floor(tonumber(rows[from + 1]))) .. ':'
        .. rows[from]
      redis.call('ZADD', dir, 0, bound)
      target = prefix .. bound
    end
    redis.call('ZADD', target, unpack(swapped(rows, from, to)))
  end
end
"""

SWAPPED_LUA = """
local function swapped(rows, from, to)
  local out = {}
  for i = from, to, 2 do out[#out + 1] = rows[i + 1]; out[#out + 1] = rows[i] end
  return out
end
"""

MOVE_LUA = """
    elseif op == 'b' then  -- a sort move: 'b' dir prefix old new member
      local dir, prefix, old, new, member = key, argv[at + 2], argv[at + 3], argv[at + 4],
        argv[at + 5]
      if old ~= '' then redis.call('ZREM', bucket_of(dir, prefix, old, member), member) end
      local bucket = bucket_of(dir, prefix, new, member)
      redis.call('ZADD', bucket, new, member)
      if redis.call('ZCARD', bucket) > FILL then split(dir, prefix, bucket) end
      at = at + 6
    elseif op == 'p' then  -- a bucket the batch added to: 'p' bucket dir prefix
      if redis.call('ZCARD', key) > FILL then
        split(keys[tonumber(argv[at + 2])], argv[at + 3], key)
      end
      at = at + 4
"""


def script(prototype: bool) -> str:
    """index.lua, or (prototype) index.lua with the 'b' op and its helpers."""
    source = _lua("index.lua")
    if not prototype:
        return source
    head = f"local FILL = {SORT_FILL}\n{SWAPPED_LUA}{BUCKETS_LUA}"
    source = source.replace("local WORKER_TASKS = 1000", head + "local WORKER_TASKS = 1000")
    return source.replace(
        "      at = last + 1\n    else", "      at = last + 1\n" + MOVE_LUA + "    else"
    )


class GBatch(_Batch):
    """``_Batch`` with G's keys: state members into creation-order buckets (and the counts
    hash), sort members (the creation order in base 36) as 'b' moves."""

    def __init__(
        self, shard: Shard, old: dict[tuple[str, str], str], directories: Any = None
    ) -> None:
        super().__init__(shard)
        self.old, self.q, self.directories = old, "", directories
        self.sorts = {key: key.rpartition(":")[2] for key in shard.keys.sort_indexes}
        self.moves: dict[tuple[str, str], list[str]] = {}  # (field, member) -> [old, new]
        self.states = f"{shard.keys.tag}:idx:"

    def entry(self, f: dict[str, str]) -> None:
        self.q = f["m"].split("|", 1)[0]
        super().entry(f)

    def put(self, op: str, key: str, member: str, score: str = "") -> None:
        field = self.sorts.get(key)
        if field is not None:
            short = base36(int(self.q))
            move = self.moves.setdefault((field, short), [self.old.get((field, short), ""), ""])
            move[1] = self.old[field, short] = score
            return
        if key.startswith(self.states):
            self.add(f"{self.k.tag}:ic", key.removeprefix(self.states), -1 if op == "r" else 1)
            key = f"{key}:{base36(int(score) // FILL)}"
        super().put(op, key, member, score)

    def ops(self) -> list[str]:
        if self.directories is None:  # the script looks each bucket up ('b')
            ops = super().ops()
            for (field, member), (old, new) in self.moves.items():
                dir_slot = self.slot(f"{self.k.tag}:bd:{field}")
                ops += ["b", dir_slot, f"{self.k.tag}:bb:{field}:", old, new, member]
            return ops
        # Grouped: the buckets looked up here in the directories read before the batch,
        # one ZREM and one ZADD per bucket (as today's ops), then a split check of each
        # bucket added to ('p'), after every add (a split moves the bounds).
        added: dict[str, str] = {}
        for (field, member), (old, new) in self.moves.items():
            bounds, prefix = self.directories[field], f"{self.k.tag}:bb:{field}:"
            if not bounds:
                bounds.append("0")
                super().put("z", f"{self.k.tag}:bd:{field}", "0", "0")
            if old:
                super().put("r", prefix + lookup(bounds, old, member), member)
            bucket = prefix + lookup(bounds, new, member)
            super().put("z", bucket, member, new)
            added[bucket] = field
        ops = super().ops()
        for bucket, field in added.items():
            ops += ["p", self.slot(bucket), self.slot(f"{self.k.tag}:bd:{field}"),
                    f"{self.k.tag}:bb:{field}:"]  # fmt: skip
        return ops


def lookup(bounds: list[str], score: str, member: str) -> str:
    """The bound of the bucket (score, member) falls in: the last at or below it."""
    return bounds[bisect.bisect_right(bounds, f"{int(float(score)):014x}:{member}") - 1]


def drain(client: redis.Redis, shard: Shard, prototype: bool, old: dict[Any, str]) -> int:
    """The shard's change stream indexed to the end by one of the indexers: batches."""
    sha = client.script_load(script(prototype))
    batches = 0
    fields = [key.rpartition(":")[2] for key in shard.keys.sort_indexes]
    while rows := client.xrange(shard.keys.index_changes, "-", "+", count=BATCH):
        directories = None
        if GROUPED:
            pipe = client.pipeline(transaction=False)
            for field in fields:
                pipe.zrange(f"{shard.keys.tag}:bd:{field}", 0, -1)
            found = pipe.execute()
            directories = {f: [b.decode() for b in d] for f, d in zip(fields, found, strict=True)}
        batch = GBatch(shard, old, directories) if prototype else _Batch(shard)
        for _, raw in rows:
            batch.entry({k.decode(): v.decode() for k, v in raw.items()})
        ops = batch.ops()
        argv = [rows[0][0].decode(), rows[-1][0].decode(), *ops]
        reply = client.evalsha(sha, len(batch.keys), *batch.keys, *argv)
        assert reply[0] == b"indexed", reply
        batches += 1
    return batches


GROUPED = False
"""--grouped: the caller reads the directories before each batch and sends one ZREM and one
ZADD per bucket (a build's way); else the script looks up each member's bucket."""
SPREAD = False
"""--spread: each task's events shifted by 3 ms per position, and apart by up to 10 ms
more, so times and runtimes differ from task to task (the bench's tasks otherwise share
them: every sort value a tie)."""


def lives(book: RedisBook, tasks: int) -> None:
    ids = [f"celery-{uuid.uuid4()}" for _ in range(tasks)]
    for task_id in ids:
        book.create(id=task_id, now_ms=T0, ttl_ms=1_800_000, max_attempts=2)
    items = [
        (task_id, event.model_copy(update={"at_ms": event.at_ms + 3 * n + i * (n % 11)}), cid)
        if SPREAD else (task_id, event, cid)
        for n, one in enumerate(ids)
        for i, (task_id, event, cid) in enumerate(celery_life(one))
    ]  # fmt: skip
    for start in range(0, len(items), BATCH):
        book.apply_many(items[start : start + BATCH])


def memory(tasks: int, prototype: bool) -> float:
    """INFO used_memory growth per task, the real book's writes indexed by one indexer."""
    with throwaway_redis() as server:
        client = redis.Redis(port=server.port)
        book = RedisBook(client, namespace="memory", retention=timedelta(hours=24))
        book.check_server()
        before = used_memory(client)
        lives(book, tasks)
        drain(client, book.driver.ns.first, prototype, {})
        per_task = (used_memory(client) - before) / tasks
        check(client, tasks, prototype)
        client.close()
        return per_task


def check(client: redis.Redis, tasks: int, prototype: bool) -> None:
    """Every task once in its indexes, today's or G's; G's sort buckets, read in their
    directory's order, in order by (value, member bytes), each at or above its bound, no
    bucket over the fill, every one a listpack, and holding each task's value as its hash
    has it (the runtime: ``e - s``)."""
    if not prototype:
        assert client.zcard("{memory}:idx:succeeded") == tasks
        return
    assert int(client.hget("{memory}:ic", "succeeded") or 0) == tasks
    keys = list(client.scan_iter(match="{memory}:t:*", count=1000))
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.hmget(key, "seq", "s", "e", "att")
    hashes = [[int(v) for v in values] for values in pipe.execute()]
    expected = {
        "started": {(base36(q), s) for q, s, _, _ in hashes},
        "ended": {(base36(q), e) for q, _, e, _ in hashes},
        "runtime": {(base36(q), e - s) for q, s, e, _ in hashes},
        "attempts": {(base36(q), a) for q, _, _, a in hashes},
    }
    for field, wanted in expected.items():
        bounds = [b.decode() for b in client.zrange(f"{{memory}}:bd:{field}", 0, -1)]
        rows: list[tuple[int, bytes]] = []
        for bound in bounds:
            key = f"{{memory}}:bb:{field}:{bound}"
            part = [
                (int(score), member) for member, score in client.zrange(key, 0, -1, withscores=True)
            ]
            assert len(part) <= SORT_FILL, (field, bound, len(part))
            assert client.object("encoding", key) in (b"listpack", None), key
            if part and bound != "0":
                assert f"{part[0][0]:014x}:{part[0][1].decode()}" >= bound, (field, bound)
            rows += part
        assert rows == sorted(rows), field
        assert {(m.decode(), v) for v, m in rows} == wanted, field
        assert len(rows) == tasks, field


def counted(grind: Any, n: int, prototype: bool) -> tuple[float, float]:
    """The writes' instructions per life (n lives, after n warming ones, indexed), and one
    indexer's, by callgrind."""
    client = redis.Redis.from_url(grind.url)
    book = RedisBook(client, namespace=f"g-{uuid.uuid4().hex[:8]}", retention=timedelta(hours=24))
    book.check_server()
    shard, old = book.driver.ns.first, {}
    lives(book, n)
    drain(client, shard, prototype, old)  # warm: scripts loaded, keys grown
    writes = grind.count(lambda: lives(book, n)) / n
    indexer = grind.count(lambda: drain(client, shard, prototype, old)) / n
    client.close()
    return writes, indexer


def instructions(n: int) -> tuple[float, float, float]:
    """The writes' instructions per life (the second namespace's), today's indexer's and
    G's, on one server under callgrind."""
    with callgrind("--hz", "1") as grind:
        _, today = counted(grind, n, False)
        writes, g = counted(grind, n, True)
    return writes, today, g


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("-n", type=int, default=200, help="lives counted by callgrind")
    parser.add_argument("--sort-fill", type=int, default=128, help="a sort bucket's most")
    parser.add_argument("--grouped", action="store_true", help="buckets looked up here")
    parser.add_argument("--spread", action="store_true", help="times differ per task")
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--skip-instructions", action="store_true")
    args = parser.parse_args()
    global SPREAD, SORT_FILL, GROUPED
    SPREAD, SORT_FILL, GROUPED = args.spread, args.sort_fill, args.grouped
    if not args.skip_memory:
        print(f"| indexer | INFO used_memory B per task ({args.tasks:,} tasks) |\n|---|---|")
        for prototype in (False, True):
            label = "G (prototype)" if prototype else "today"
            print(f"| {label} | {memory(args.tasks, prototype):,.0f} |", flush=True)
    if not args.skip_instructions:
        writes, today, g = instructions(args.n)
        print(f"\n| Redis instructions per life (-n {args.n}) | |\n|---|---|")
        print(f"| the writes (the five events) | {writes:,.0f} |")
        print(f"| indexer: today | {today:,.0f} |\n| indexer: G (prototype) | {g:,.0f} |")
        print(f"| G / today (indexer) | {g / today:.2f} |")
        print(f"| life (writes + indexer), G / today | {(writes + g) / (writes + today):.3f} |")


if __name__ == "__main__":
    main()
