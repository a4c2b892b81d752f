"""Random operation sequences over a book, and a runner that records every outcome as JSON.

Used by the property tests and by the differential test that holds every book to the
same results.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from asyncbook import AsyncBook, AsyncBookError, to_wire

TASK_IDS = ["a", "b", "\U0001f600", "x:{y}"]
CALLBACK_IDS = ["c1", "c2", "c3", "c4", "c5", "c6", "a:c", "celery:b:success:0"]
"""Ids of their own, and ids derived from a task's (a sharded book's claims: _claims)."""

times = st.one_of(st.integers(0, 160), st.sampled_from([0.5, 99.5, -1, 100.0]))
progress_values = st.one_of(st.integers(0, 100), st.sampled_from([101, -1, 12.5, 50.0]))
texts = st.sampled_from(["", " ", "r1", "r2", "h1", "h2", "\u3000"])

events = st.one_of(
    st.builds(
        lambda at, w: {"type": "start", "atMs": at, "worker": w},
        times,
        st.sampled_from(["w1", "w2"]),
    ),
    st.builds(
        lambda at, p, c: {"type": "progress", "atMs": at, "progress": p, "cursor": c},
        times,
        progress_values,
        st.sampled_from(["", "k"]),
    ),
    st.builds(
        lambda at, r, h: {"type": "succeed", "atMs": at, "resultRef": r, "resultHash": h},
        times,
        texts,
        texts,
    ),
    st.builds(
        lambda at, e, r: {"type": "fail", "atMs": at, "error": e, "retryable": r},
        times,
        st.sampled_from(["oom", "bad"]),
        st.booleans(),
    ),
    st.builds(lambda at: {"type": "expire", "atMs": at}, times),
    st.builds(
        lambda at, r: {"type": "cancel", "atMs": at, **({} if r is None else {"reason": r})},
        times,
        st.one_of(st.none(), texts, st.just(7)),
    ),
    st.just({"type": "start", "atMs": "1", "worker": "w"}),
)

task_ids = st.sampled_from(TASK_IDS)

operations = st.one_of(
    st.tuples(
        st.just("create"),
        task_ids,
        st.integers(0, 20),
        st.sampled_from([50, 100, 150, 0]),
        st.integers(0, 3),
        st.booleans(),
    ),
    st.tuples(
        st.just("apply"), task_ids, events, st.one_of(st.none(), st.sampled_from(CALLBACK_IDS))
    ),
    st.tuples(st.just("apply"), task_ids, events, st.none()),
    st.tuples(st.just("expire"), task_ids),
    st.tuples(
        st.just("cancel"),
        task_ids,
        st.one_of(st.none(), texts),
        times,
        st.one_of(st.none(), st.sampled_from(CALLBACK_IDS)),
        st.sampled_from([None, "ops"]),  # with an actor: audited, the same answer
    ),
    st.tuples(st.just("resume"), task_ids, st.integers(-1, 12)),
    st.tuples(
        st.just("deliver"), task_ids, st.sampled_from(["k1", "k2", " ", "b:k"]), st.integers(0, 200)
    ),
    st.tuples(st.just("drain")),
)

# Tasks are created first, so that most operations find their task.
sequences = st.tuples(
    st.lists(
        st.tuples(
            st.just("create"), task_ids, st.just(0), st.just(100), st.integers(1, 3), st.just(False)
        ),
        max_size=3,
    ),
    st.lists(operations, max_size=40),
).map(lambda pair: pair[0] + pair[1])


def run_operation(book: AsyncBook, op: tuple[Any, ...]) -> Any:
    """Run one operation; return its result as JSON, or the error code it raised."""
    kind = op[0]
    try:
        if kind == "create":
            _, task_id, now, ttl, attempts, exist_ok = op
            return to_wire(
                book.create(
                    id=task_id, now_ms=now, ttl_ms=ttl, max_attempts=attempts, exist_ok=exist_ok
                )
            )
        if kind == "apply":
            _, task_id, event, callback_id = op
            return to_wire(book.apply(task_id, event, callback_id))
        if kind == "expire":
            return to_wire(book.expire(op[1]))
        if kind == "cancel":
            _, task_id, reason, at, callback_id, actor = op
            answer = book.cancel(task_id, reason, at_ms=at, callback_id=callback_id, actor=actor)
            return to_wire(answer)
        if kind == "resume":
            return to_wire(book.resume(op[1], op[2]))
        if kind == "deliver":
            return to_wire(book.deliver_result(op[1], op[2], op[3]))
        if kind == "drain":
            return [to_wire(note) for note in book.drain_notifications()]
        if kind == "get":
            task = book.get(op[1])
            return None if task is None else to_wire(task)
    except AsyncBookError as error:
        return {"error": error.code}
    raise AssertionError(f"unknown operation {kind}")


def run_sequence(book: AsyncBook, ops: list[tuple[Any, ...]]) -> list[Any]:
    """Run every operation, then a final drain; return all outcomes."""
    outcomes = [run_operation(book, op) for op in ops]
    outcomes.append(run_operation(book, ("drain",)))
    return outcomes
