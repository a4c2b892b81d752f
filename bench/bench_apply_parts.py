"""Where a write's instructions go: one kind of book call, replayed through copies of the
book's library that return early at marked points, each counted by callgrind on a
private ``redis-server``.

Run (needs valgrind and redis-server)::

    .venv/bin/python bench/bench_apply_parts.py [-n 200] [--call apply|create|execution]
        [--warm 300]

``--call apply`` (the default): the start and the succeed of the plain life, as
``book.apply`` sends them, cut in ``apply_event`` and ``commit`` (_apply.lua);
``create``: a create as the publisher sends it, cut in ``create_task`` (_create.lua);
``execution``: the Celery result backend's one call for a start and a succeed with
Celery's meta (``execution.lua`` by ``apply_in_script``), cut in ``start_and_end`` and
``commit``. Each row is the instructions in Redis per call up to and including that part;
a row minus the one above is what the part costs. The calls are the ones the book sends
(captured once, then sent again for fresh tasks with their ids in place); ``--warm`` lives
are written first, so the namespace's sorted sets are past a listpack's size.

``--known-record`` (with ``--call apply``) weighs issue 32's lever "the transition where
it is cheapest": the start and the succeed through a copy of the library whose
``apply_event`` does not read the record but takes it as the caller would send it (eight
more ARGV, then an ``HMGET`` of the version and the creation order, the version check such
a call needs), against the library as it is; the rest of the call (the checks, the
transition, every write, the answer) unchanged.
"""

from __future__ import annotations

import argparse
import contextlib
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from bench_peers import HASH, AsyncbookSide
from bench_peers_instructions import callgrind
from bench_visibility import celery_life

from asyncbook import RedisBook, SucceedEvent
from asyncbook.celery._backend import _execution_source
from asyncbook.redis import _lane, _scripts

Cut = tuple[str, str, str, str]
"""A point: its name, the file, the text it goes before, what the cut returns."""

APPLY: list[Cut] = [
    ("the call and its arguments", "_apply.lua", "  local with_history = e.with_history", "{}"),
    (
        "the record read",
        "_apply.lua",
        "  local missing = info_missing(c, t, {event_facts(e)})\n",
        "{}",
    ),
    (
        "its facts and callback marker checked",
        "_apply.lua",
        "  if e.event_valid ~= '1' then\n",
        "{}",
    ),
    ("the transition", "_apply.lua", "  commit(KEYS, c, t, {s})\n", "{}"),
]
EACH_STEP = "  for _, s in ipairs(steps) do\n"
COMMIT: list[Cut] = [
    ("the record's HSET (and the answer)", "_apply.lua", "    if unnamed then\n", ""),
    ("the history's RPUSH", "_apply.lua", "    -- The indexes' change (index_change", ""),
    ("the end's retention and the change entry", "_apply.lua",
     "    for _, s in ipairs(steps) do\n      if s.changed then\n", ""),
    ("the change feed (PUBLISH)", "_apply.lua", "  if t.gk and changed then\n", ""),
    ("the group and the stall clock", "_apply.lua", f"{EACH_STEP}    local given", ""),
    ("the callback markers", "_apply.lua", f"{EACH_STEP}    if s.notify then", ""),
    ("the outbox", "_apply.lua", f"{EACH_STEP}    count_reason(", ""),
]  # fmt: skip
EXECUTION: list[Cut] = [
    ("the call and both events' arguments", "_apply.lua",
     "  local c = info_block(KEYS, APPLY_KEYC + 1 + count", "nil, {'!cut'}"),
    ("the record read and its facts", "_apply.lua", "  if count == 2 then\n", "nil, {'!cut'}"),
    ("the checks of start_and_end", "_apply.lua",
     "  local exp, at1, at2 = tonumber(t.exp), tonumber(A.at_ms)", "{}"),
    ("both callback markers checked", "_apply.lua",
     "  local started = transition(t, A, A.type", "{}"),
    ("both transitions", "_apply.lua", "  commit(KEYS, c, t, {started, ending})\n", "{}"),
    *COMMIT,
    ("the counters", "execution.lua", "-- The task's state: the last compact answer",
     "{'written', '', answers}"),
]  # fmt: skip
CREATE: list[Cut] = [
    ("the call and its arguments", "_create.lua", "  local existing = ", "{'created'}"),
    ("the record read (a new id's)", "_create.lua", "  -- A history left behind", "{'created'}"),
    ("the stray history's DEL", "_create.lua", "  local seq = next_seq(KEYS[5])\n", "{'created'}"),
    ("the creation order", "_create.lua", "  if a.heartbeat_timeout_ms ~= ''", "{'created'}"),
    ("the record's fields", "_create.lua", "  info_created(KEYS, a.task_id, seq,", "{'created'}"),
    ("the info's companion hash", "_create.lua", "  for _, extra in ipairs(a.extra", "{'created'}"),
    ("the record's HSET", "_create.lua", "  index_change(KEYS[3], {n = a.name", "{'created'}"),
    ("the change entry", "_create.lua", "  redis.call('ZADD', KEYS[4], a.deadline", "{'created'}"),
    ("the deadline", "_create.lua", "  if a.message ~= '' then\n", "{'created'}"),
    ("the kept message", "_create.lua", "  announce(a.changes_channel", "{'created'}"),
]  # fmt: skip
KNOWN_READ = (
    "  local loaded = with_history and load_full(KEYS[K_TASK], KEYS[K_HISTORY]) "
    "or load_task(KEYS[K_TASK])\n"
    "  local t, refused = usable(loaded, KEYS[K_HISTORY])\n"
    "  if refused then\n    return refused\n  end\n"
)
KNOWN_RECORD = """  -- The record as the caller holds it (the bench's tasks: created, or started
  -- once), checked by its version; its numbers would come in the ARGV the call carries.
  local v = redis.call('HMGET', KEYS[K_TASK], 'ver', 'seq')
  local ver = tonumber(v[1])
  local t = {id = cjson.encode(e.task_id), st = ver == 0 and 'queued' or 'running',
    exp = '99999999999999', att = ver, max = 4, prog = 0, ver = ver, seq = v[2],
    hbt = 60000, rdl = '0', n = 'resize', i = '1', s = ver == 1 and e.at_ms or nil,
    w = ver == 1 and 'celery@bench' or nil}
  if with_history then
    t.events = ver > 0 and redis.call('LRANGE', KEYS[K_HISTORY], 0, -1) or {}
  end
"""
KNOWN_ARGV = ["queued", "1796665460317", "0", "4", "0", "0", "1", "60000"]
"""What the caller would add: the record's state, deadline and numbers."""
CUTS = {"apply": APPLY + COMMIT, "create": CREATE, "execution": EXECUTION}
FUNCTION = {"apply": "apply", "create": "create", "execution": "events"}
"""The library function each kind of call goes to."""
LAST = ("the whole call", "", "", "")


def library_cut_at(cut: Cut, execution: str, known: bool = False) -> tuple[str, str]:
    """The book's library (with ``execution``: the events library of that script) with
    the cut's early return in place (``known``: and the record taken from the caller,
    ``KNOWN_RECORD``): its name and source."""
    name, file, before, answer = cut
    sources = {"execution.lua": execution}
    if known:
        text = _scripts._lua("_apply.lua")
        assert KNOWN_READ in text, "the record read moved in _apply.lua"
        sources["_apply.lua"] = text.replace(KNOWN_READ, KNOWN_RECORD, 1)
    if file:
        text = sources.get(file) or _scripts._lua(file)
        assert before in text, f"{name}: {before!r} is not in {file}"
        sources[file] = text.replace(before, f"  do return {answer} end\n{before}", 1)
    original = _scripts._lua
    _scripts._lua = lambda each: sources.get(each) or original(each)
    try:
        return _scripts.library.__wrapped__(sources["execution.lua"] if execution else "")  # type: ignore[attr-defined,no-any-return]
    finally:
        _scripts._lua = original


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=200, help="calls per point")
    parser.add_argument("--call", choices=sorted(CUTS), default="apply")
    parser.add_argument("--warm", type=int, default=1, help="lives written before")
    parser.add_argument(
        "--known-record", action="store_true", help="the record read against it sent (apply)"
    )
    options = parser.parse_args()
    if options.known_record and options.call != "apply":
        parser.error("--known-record weighs --call apply")
    n, kind = options.n, options.call
    sent: list[tuple[list[str], int]] = []
    call = _lane.ScriptLane.call

    def recorded(lane: Any, method: str, target: bytes, texts: Any, key_count: int) -> Any:
        sent.append(([t.decode() if isinstance(t, bytes) else str(t) for t in texts], key_count))
        return call(lane, method, target, texts, key_count)

    with callgrind("--hz", "1") as grind:
        book = RedisBook.from_url(
            grind.url,
            namespace=f"bench-parts-{uuid.uuid4().hex[:8]}",
            retention=timedelta(hours=24),
        )
        book.check_server()
        for _ in range(options.warm):
            if kind == "execution":
                celery_life(book, True)
            else:
                AsyncbookSide.lifecycle(book, False)
        book.catch_up_index(batches=1_000)
        _lane.ScriptLane.call = recorded  # type: ignore[method-assign]
        if kind == "create":
            task_id, nonce = AsyncbookSide.created(book)[0], ""
            calls = sent[-1:]
        elif kind == "execution":
            (task_id, nonce), calls = celery_life(book, True), sent[-1:]
        else:
            task_id, now, nonce, start = AsyncbookSide.created(book)
            sent.clear()
            book.apply(task_id, start, f"celery:{task_id}:start:0:{nonce}")
            ref = f"celery-task-meta-{task_id}"
            done = SucceedEvent(at_ms=now + 3, result_ref=ref, result_hash=HASH)
            book.apply(task_id, done, f"celery:{task_id}:success:0")
            calls = sent[:2]
        _lane.ScriptLane.call = call  # type: ignore[method-assign]
        execution = _execution_source() if kind == "execution" else ""
        real = f"{_scripts.library('')[0]}_apply"  # the book's own apply

        def again(
            texts: list[str],
            keys: int,
            function: str,
            tasks: list[tuple[str, str]],
            extra: list[str] | None = None,
        ) -> Callable[[], None]:
            def run() -> None:
                for other, other_nonce in tasks:
                    mine = [t.replace(task_id, other) for t in texts] + (extra or [])
                    if nonce:  # a create's call has no callback id
                        mine = [t.replace(nonce, other_nonce) for t in mine]
                    with contextlib.suppress(Exception):  # a cut answer may not parse
                        book.client.execute_command("FCALL", function, keys, *mine)

            return run

        names = ["start", "succeed"] if kind == "apply" else [kind]
        print(f"{n} calls per point after {options.warm} lives; instructions in Redis per call")
        print(f"\n| up to and including | {' | '.join(names)} |")
        print("|---|" + "---|" * len(names))
        points = [(cut, False) for cut in [*CUTS[kind], LAST]]
        if options.known_record:
            known = ("the record sent by the caller: the whole call", "", "", "")
            points = [(LAST, False), (known, True)] * 2  # each twice, alternately
        for cut, is_known in points:
            lib, text = library_cut_at(cut, execution, is_known)
            book.client.execute_command("FUNCTION", "LOAD", "REPLACE", text)
            function = f"{lib}_{FUNCTION[kind]}"
            tasks = [(str(uuid.uuid4()), uuid.uuid4().hex[:8]) for _ in range(n)]
            if kind != "create":
                tasks = [AsyncbookSide.created(book)[::2] for _ in range(n)]  # type: ignore[misc]
            counts = []
            for at, (texts, keys) in enumerate(calls):
                extra = KNOWN_ARGV if is_known else None
                counts.append(grind.count(again(texts, keys, function, tasks, extra)) / n)
                if at + 1 < len(calls):
                    again(texts, keys, real, tasks)()  # done for real, for the next call
            book.catch_up_index(batches=1_000)
            print(f"| {cut[0]} | {' | '.join(f'{c:,.0f}' for c in counts)} |", flush=True)
        book.client.close()


if __name__ == "__main__":
    main()
