"""Where an apply's instructions go: a start and a succeed of the plain life, replayed
through copies of the book's library that return early at marked points of apply_event
and commit (_apply.lua), each counted by callgrind on a private ``redis-server``.

Run (needs valgrind and redis-server)::

    .venv/bin/python bench/bench_apply_parts.py [-n 200]

Each row is the instructions in Redis per call up to that point (the call's own answer
included from ``hset`` on, where only commit returns early); a row minus the one above
is what that part costs. The calls are the ones ``book.apply`` sends (captured once, then
sent again for fresh tasks with their ids in place), so the figures are the real
scripts' up to the cut.
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

from asyncbook import RedisBook, SucceedEvent
from asyncbook.redis import _lane, _scripts

CUTS: list[tuple[str, str, str]] = [
    # (name, the text it goes before, how it returns)
    ("the call and its arguments", "  local with_history = e.with_history == '1'\n", "{'!cut'}"),
    ("the record read", "  local missing = info_missing(c, t, {event_facts(e)})\n", "{'!cut'}"),
    ("its facts and callback marker checked", "  if e.event_valid ~= '1' then\n", "{'!cut'}"),
    ("the transition", "  commit(KEYS, c, t, {s})\n", "{'!cut'}"),
    ("the record's HSET (and the answer)", "    if unnamed then\n", ""),
    ("the history's RPUSH", "    -- The indexes' change (index_change", ""),
    ("the index's change", "    for _, s in ipairs(steps) do\n      if s.changed then\n", ""),
    ("the change feed (PUBLISH)", "  if t.gk and changed then\n", ""),
    ("the group and the stall clock", "  for _, s in ipairs(steps) do\n    local given", ""),
    ("the marker, outbox and counters (all of it)", "", ""),
]


def library_cut_at(point: int) -> tuple[str, str]:
    """The book's library with apply_event or commit returning at CUTS[point]."""
    source = _scripts._lua("_apply.lua")
    name, before, answer = CUTS[point]
    if before:
        assert source.count(before) >= 1, f"{name}: {before!r} is not in _apply.lua"
        source = source.replace(before, f"  do return {answer} end\n{before}", 1)
    original = _scripts._lua
    _scripts._lua = lambda file: source if file == "_apply.lua" else original(file)
    try:
        return _scripts.library.__wrapped__()  # type: ignore[attr-defined,no-any-return]
    finally:
        _scripts._lua = original


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=200, help="calls per point")
    n = parser.parse_args().n
    sent: list[tuple[bytes, list[Any], int]] = []
    call = _lane.ScriptLane.call

    def recorded(lane: Any, method: str, target: bytes, texts: Any, key_count: int) -> Any:
        sent.append((target, list(texts), key_count))
        return call(lane, method, target, texts, key_count)

    _lane.ScriptLane.call = recorded  # type: ignore[method-assign]
    with callgrind("--hz", "1") as grind:
        book = RedisBook.from_url(
            grind.url,
            namespace=f"bench-parts-{uuid.uuid4().hex[:8]}",
            retention=timedelta(hours=24),
        )
        book.check_server()
        task_id, now, nonce, start = AsyncbookSide.created(book)
        sent.clear()
        book.apply(task_id, start, f"celery:{task_id}:start:0:{nonce}")
        done = SucceedEvent(
            at_ms=now + 3, result_ref=f"celery-task-meta-{task_id}", result_hash=HASH
        )
        book.apply(task_id, done, f"celery:{task_id}:success:0")
        (real, start_texts, keys), (_, succeed_texts, _) = sent[:2]
        _lane.ScriptLane.call = call  # type: ignore[method-assign]

        def again(
            texts: list[Any], function: bytes, tasks: list[tuple[str, str]]
        ) -> Callable[[], None]:
            def run() -> None:
                for other, other_nonce in tasks:
                    mine = [t.decode() if isinstance(t, bytes) else str(t) for t in texts]
                    mine = [t.replace(task_id, other).replace(nonce, other_nonce) for t in mine]
                    with contextlib.suppress(Exception):  # a cut answer may not parse
                        book.client.execute_command("FCALL", function, keys, *mine)

            return run

        print(f"{n} calls per point; instructions in Redis per call, up to and including")
        print("\n| point | start | succeed |")
        print("|---|---|---|")
        for point, (name, _, _) in enumerate(CUTS):
            lib, text = library_cut_at(point)
            book.client.execute_command("FUNCTION", "LOAD", "REPLACE", text)
            function = f"{lib}_apply".encode()
            tasks = [AsyncbookSide.created(book)[::2] for _ in range(n)]
            pairs = [(str(t), str(x)) for t, x in tasks]
            started = grind.count(again(start_texts, function, pairs)) / n
            again(start_texts, real, pairs)()  # started for real, for the succeed
            ended = grind.count(again(succeed_texts, function, pairs)) / n
            book.catch_up_index(batches=1_000)
            print(f"| {name} | {started:,.0f} | {ended:,.0f} |", flush=True)
        book.client.close()


if __name__ == "__main__":
    main()
