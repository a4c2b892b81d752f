"""Memory per finished task in candidate key layouts (issue 32): measured, not built.

Run:  cd bench && PYTHONPATH=.. ../.venv/bin/python bench_memory_layouts.py [--tasks 10000]

Runs the real book once (``--tasks`` tasks, each created and given the five-event life of
``bench_redis_book.celery_life``, then its indexes caught up) on a throwaway redis-server
(default configuration, loopback, a free port), takes the first task's keys as the
template (its hash, its history, its index members and scores, its outbox entry), then
for each layout starts a fresh server and writes ``--tasks`` copies of that task with
fresh ids straight through redis-py pipelines. Each line is ``INFO used_memory`` growth
per task, read as ``bench_memory.py`` does (after MEMORY PURGE and CONFIG RESETSTAT).
"""

from __future__ import annotations

import argparse
import json
import string
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import redis
from _servers import throwaway_redis
from bench_redis_book import celery_life

from asyncbook import RedisBook

T0 = 1_700_000_000_000
TAG = "{memory}"
RETENTION_MS = 86_400_000
STATE_INDEX = "idx:succeeded"
SORT_INDEXES = ("by:started", "by:ended", "by:runtime", "by:attempts")
WORKER_CAP = 1000  # the worker index keeps a worker's latest 1,000 tasks
BATCH = 500
DIGITS = string.digits + string.ascii_lowercase


def base36(number: int) -> str:
    """``number`` (>= 0) in base 36: a short member or key suffix."""
    text = ""
    while True:
        number, digit = divmod(number, 36)
        text = DIGITS[digit] + text
        if not number:
            return text


@dataclass(frozen=True)
class Template:
    """One real finished task's bytes, with its id to replace."""

    id: str
    fields: dict[str, str]
    history: list[str]
    sort_scores: dict[str, float]  # sort index -> the task's score
    workers: list[str]  # the worker indexes (each holds the latest WORKER_CAP tasks)
    outbox: dict[str, str]

    def fields_of(self, task_id: str, seq: int) -> dict[str, str]:
        fields = {name: value.replace(self.id, task_id) for name, value in self.fields.items()}
        fields["seq"] = str(seq)
        return fields

    def history_of(self, task_id: str) -> list[str]:
        return [entry.replace(self.id, task_id) for entry in self.history]


@dataclass(frozen=True)
class Layout:
    """A candidate layout: which of the levers it pulls."""

    label: str
    short: bool = False  # index members: the creation order in base 36, not the id
    short_sort: bool = False  # only the sort indexes' members short; the state index (ids,
    # by creation order) then serves as the seq -> id map: no map of its own
    fill: int = 0  # > 0: each index split into sorted sets of `fill` members (listpack)
    sort_fill: int = 0  # > 0: the sort indexes' buckets hold this many instead of fill
    built: bool = False  # G's keys as a build would name them (see task_writes)
    bucket_state: bool = True  # with fill: the state index in buckets too
    history_in_hash: bool = False  # the history as one field (a JSON array) of the hash
    server_args: list[str] = field(default_factory=list)


LONG_VALUES = ["--hash-max-listpack-value", "1024"]  # a server setting, not the book's

LAYOUTS = [
    Layout("A. today's layout"),
    Layout("B. short members (base-36 creation order), a seq->id map", short=True),
    Layout("C. every index in buckets of 128 members", fill=128),
    Layout("C. buckets half full (64)", fill=64),
    Layout("D. B + C", short=True, fill=128),
    Layout("D. buckets half full (64)", short=True, fill=64),
    Layout("E. history as a hash field (the hash leaves listpack)", history_in_hash=True),
    Layout("E'. E with hash-max-listpack-value 1024", history_in_hash=True,
           server_args=LONG_VALUES),
    Layout("F. sort indexes only: buckets of 128, short members; state index as today",
           short_sort=True, fill=128, bucket_state=False),
    Layout("F. buckets half full (64)", short_sort=True, fill=64, bucket_state=False),
    Layout("G. C + short members in the sort indexes (no seq->id map)",
           short_sort=True, fill=128),
    Layout("G. sort buckets half full (64: after splits), state buckets full (128)",
           short_sort=True, fill=128, sort_fill=64),
    Layout("G as built: sort buckets named by their lower bound (score, seq), a lex "
           "directory; state buckets seq // 128 by arithmetic; a counts hash",
           short_sort=True, fill=128, built=True),
    Layout("G as built, sort buckets half full (64)", short_sort=True, fill=128, sort_fill=64,
           built=True),
    Layout("C + E'", fill=128, history_in_hash=True, server_args=LONG_VALUES),
    Layout("D + E'", short=True, fill=128, history_in_hash=True, server_args=LONG_VALUES),
]  # fmt: skip


@contextmanager
def text_server(*config: str) -> Iterator[redis.Redis]:
    """A throwaway redis-server (``_servers.throwaway_redis``), a client that decodes."""
    with throwaway_redis(*config) as server:
        client = redis.Redis(port=server.port, decode_responses=True)
        try:
            yield client
        finally:
            client.close()


def used_memory(client: redis.Redis) -> int:
    client.memory_purge()
    client.config_resetstat()
    return int(client.info("memory")["used_memory"])


def fresh_ids(tasks: int) -> list[str]:
    return [f"celery-{uuid.uuid4()}" for _ in range(tasks)]


def real_book(tasks: int) -> tuple[float, Template]:
    """The real book's used_memory per task (indexes caught up), and its first task."""
    with text_server() as text:
        client = redis.Redis(port=text.connection_pool.connection_kwargs["port"])  # bytes
        book = RedisBook(client, namespace="memory", retention=timedelta(hours=24))
        before = used_memory(text)
        ids = fresh_ids(tasks)
        for task_id in ids:
            book.create(id=task_id, now_ms=T0, ttl_ms=1_800_000, max_attempts=2)
        items = [item for task_id in ids for item in celery_life(task_id)]
        for start in range(0, len(items), BATCH):
            book.apply_many(items[start : start + BATCH])
        book.catch_up_index(batches=10**9)
        per_task = (used_memory(text) - before) / tasks
        client.close()
        return per_task, template_of(text, ids[0])


def template_of(client: redis.Redis, task_id: str) -> Template:
    fields = {str(name): str(value) for name, value in client.hgetall(f"{TAG}:t:{task_id}").items()}
    history = [str(entry) for entry in client.lrange(f"{TAG}:h:{task_id}", 0, -1)]
    scores = {index: client.zscore(f"{TAG}:{index}", task_id) for index in SORT_INDEXES}
    assert client.zscore(f"{TAG}:{STATE_INDEX}", task_id) == float(fields["seq"])
    # The worker indexes (the first task has left them: they keep the latest tasks only).
    workers = [key.removeprefix(f"{TAG}:") for key in client.scan_iter(match=f"{TAG}:w:*")]
    entries = [{str(k): str(v) for k, v in (entry or {}).items()} for _, entry in
               client.xrange(f"{TAG}:outbox") or []]  # fmt: skip
    outbox = next(entry for entry in entries if entry["taskId"] == task_id)
    assert all(score is not None for score in scores.values()), scores
    return Template(
        task_id,
        fields,
        history,
        {index: float(score or 0) for index, score in scores.items()},
        workers,
        outbox,
    )


def score_text(score: float) -> str:
    return str(int(score)) if score.is_integer() else repr(score)


def task_writes(
    pipe: Any, layout: Layout, template: Template, position: int, task_id: str, tasks: int
) -> None:
    """Queue one finished task's keys in ``layout`` (position: its creation order - 1)."""
    seq = position + 1
    short = base36(seq)
    member = short if layout.short else task_id
    fields = template.fields_of(task_id, seq)
    history = template.history_of(task_id)
    task_key = f"{TAG}:t:{task_id}"
    if layout.history_in_hash:
        fields["h"] = "[" + ",".join(history) + "]"
    pipe.hset(task_key, mapping=fields)
    pipe.pexpire(task_key, RETENTION_MS)
    if not layout.history_in_hash:
        history_key = f"{TAG}:h:{task_id}"
        pipe.rpush(history_key, *history)
        pipe.pexpire(history_key, RETENTION_MS)
    scores = {STATE_INDEX: float(seq), **template.sort_scores}
    for index, score in scores.items():
        key = f"{TAG}:{index}"
        in_index = short if layout.short_sort and index != STATE_INDEX else member
        if layout.built:
            key = built_key(pipe, index, score, in_index, position, layout)
        elif layout.fill and (layout.bucket_state or index != STATE_INDEX):
            fill = layout.sort_fill if layout.sort_fill and index != STATE_INDEX else layout.fill
            bucket = base36(position // fill)
            if position % fill == 0:  # the index's directory of buckets, by lower bound
                pipe.zadd(f"{key}:dir", {bucket: score})
            key = f"{key}:{bucket}"
        pipe.zadd(key, {in_index: score_text(score)})
    if layout.short:  # seq -> id, in hashes of 128 fields (listpack), expiring with the tasks
        mapping = f"{TAG}:sid:{base36(position // 128)}"
        pipe.hset(mapping, member, task_id)
        if position % 128 == 0:
            pipe.pexpire(mapping, RETENTION_MS)
    if position >= tasks - WORKER_CAP:  # the worker indexes keep their latest tasks only
        for worker in template.workers:
            pipe.zadd(f"{TAG}:{worker}", {member: seq})
    pipe.xadd(f"{TAG}:outbox", {**template.outbox, "taskId": task_id})


def built_key(
    pipe: Any, index: str, score: float, member: str, position: int, layout: Layout
) -> str:
    """The bucket of ``index`` a build of G writes ``member`` to. A state index's bucket is
    its creation order // 128 (``ib:<state>:<n>``: no directory; a counts hash ``ic`` keeps
    its size); a sort index's is found in its directory (``bd:<field>``, members the
    buckets' lower bounds, all of score 0 so that they sort by bytes: the score as 14 hex
    digits, ':' and the member, so ties split), and named by its lower bound."""
    if index == STATE_INDEX:
        pipe.hincrby(f"{TAG}:ic", "succeeded", 1)
        return f"{TAG}:ib:succeeded:{base36(position // layout.fill)}"
    fill = layout.sort_fill or layout.fill
    field, first = index.removeprefix("by:"), position - position % fill
    bound = f"{int(score):014x}:{base36(first + 1)}" if first else "0"
    if position == first:
        pipe.zadd(f"{TAG}:bd:{field}", {bound: 0})
    return f"{TAG}:bb:{field}:{bound}"


def measure(layout: Layout, template: Template, tasks: int) -> tuple[float, dict[str, str]]:
    """used_memory growth per task of ``tasks`` copies of ``template`` in ``layout``, and
    the encodings of its first task's keys."""
    with text_server(*layout.server_args) as client:
        before = used_memory(client)
        ids = fresh_ids(tasks)
        for start in range(0, tasks, BATCH):
            pipe = client.pipeline(transaction=False)
            for position in range(start, min(start + BATCH, tasks)):
                task_writes(pipe, layout, template, position, ids[position], tasks)
            pipe.execute()
        client.set(f"{TAG}:seq", tasks)
        per_task = (used_memory(client) - before) / tasks
        return per_task, encodings(client, ids[0])


def encodings(client: redis.Redis, task_id: str) -> dict[str, str]:
    """Each key kind's encoding (the first key of the kind), to show what fell off listpack."""
    found: dict[str, str] = {}
    for key in client.scan_iter(match=f"{TAG}:*", count=5000):
        kind = key.removeprefix(f"{TAG}:").replace(task_id, "<id>").split(":")[0]
        found.setdefault(kind, str(client.object("encoding", key)))
    return dict(sorted(found.items()))


def rows(args: argparse.Namespace) -> Iterator[tuple[str, float, dict[str, str]]]:
    real, template = real_book(args.tasks)
    yield "real book (bench_memory.py's run, indexes caught up)", real, {}
    for layout in LAYOUTS:
        if args.only and not layout.label.startswith(tuple(args.only)):
            continue
        per_task, kinds = measure(layout, template, args.tasks)
        yield layout.label, per_task, kinds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--only", nargs="*", help="the layouts whose label starts so")
    parser.add_argument("--encodings", action="store_true", help="print each key kind's encoding")
    args = parser.parse_args()
    print(f"| layout | B per task (INFO used_memory, {args.tasks:,} tasks) |\n|---|---|")
    for label, per_task, kinds in rows(args):
        print(f"| {label} | {per_task:,.0f} |", flush=True)
        if args.encodings and kinds:
            print(f"|   encodings | {json.dumps(kinds)} |", flush=True)


if __name__ == "__main__":
    main()
