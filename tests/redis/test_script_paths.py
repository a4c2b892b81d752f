"""Every script path of RedisBook against the pure machine (``MemoryBook`` applies
``_machine.py``), on random operation sequences: an execution's start and end applied
together (``start_and_end``, through ``apply_in_script``), any other events applied in one
script, batches (``apply_many``, ``expire_many``) and the Celery execution script
(``celery/lua/execution.lua``, as ``AsyncBookBackend`` calls it), with its meta write.
``apply``, ``cancel``, ``resume`` and ``deliver``: ``test_differential.py``."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from functools import cache
from importlib import resources
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from asyncbook import (
    AsyncBookError,
    CallbackResult,
    MemoryBook,
    RedisBook,
    StartEvent,
    SucceedEvent,
    to_wire,
)
from asyncbook.celery._execution_args import ExecutionArgs
from asyncbook.redis import BookScript, EventOutcome

from ..support.books import delete_namespace, redis_client
from ..support.events import expire, progress, start, succeed
from ..support.operations import TASK_IDS, events

CALLBACK_IDS = [f"c{n}" for n in range(12)]
# The smallest caller of apply_events: the events' answers.
EVENTS_ONLY = """
local answers, missing = apply_events(KEYS, ARGV, 1)
if missing then
  return missing
elseif not answers then
  return {'!unknown'}
end
return {'events', '', answers}
"""

times = st.integers(0, 160)
starts = st.builds(
    lambda at, worker: {"type": "start", "atMs": at, "worker": worker},
    times,
    st.sampled_from(["w1", "w2"]),
)
ends = st.one_of(
    st.builds(
        lambda at, ref: {"type": "succeed", "atMs": at, "resultRef": ref, "resultHash": "h"},
        times,
        st.sampled_from(["r1", "r1", "r1", " "]),
    ),
    st.builds(
        lambda at, retry: {"type": "fail", "atMs": at, "error": "oom", "retryable": retry},
        times,
        st.booleans(),
    ),
)
callbacks = st.one_of(st.none(), st.sampled_from(CALLBACK_IDS))
# An execution's start and end (new callbacks, mostly), or any few events.
runs = st.one_of(
    st.tuples(starts, st.sampled_from(CALLBACK_IDS), ends, st.sampled_from(CALLBACK_IDS)).map(
        lambda r: [(r[0], r[1]), (r[2], r[3])]
    ),
    st.lists(st.tuples(st.one_of(events, starts, ends), callbacks), min_size=1, max_size=4),
)
task_ids = st.sampled_from(TASK_IDS)
creates = st.tuples(st.just("create"), task_ids, st.sampled_from([50, 100, 150]), st.integers(1, 3))
executions = st.tuples(
    st.just("execution"),
    st.sampled_from(TASK_IDS[:2]),  # two ids: an execution often meets an earlier one's meta
    st.lists(st.tuples(st.one_of(starts, ends, events), callbacks), max_size=3),
    st.sampled_from(["json", "none", "keep"]),
    st.sampled_from(["", "|expired|cancelled|", "|expired|cancelled|failed|"]),
    st.sampled_from(["SUCCESS", "FAILURE"]),
)
operations = st.one_of(
    creates,
    st.tuples(st.just("run"), task_ids, runs),
    st.tuples(
        st.just("batch"),
        st.lists(st.tuples(task_ids, st.one_of(events, starts, ends), callbacks), max_size=5),
    ),
    st.tuples(st.just("expire_many"), st.lists(task_ids, max_size=3)),
    executions,
    executions,
)
sequences = st.tuples(st.lists(creates, min_size=1, max_size=3), st.lists(operations, max_size=14))

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _outcome(result: Any) -> Any:
    """One event's outcome, as the book answered it: a compact outcome or an error code."""
    if isinstance(result, AsyncBookError):
        return {"error": result.code}
    if isinstance(result, CallbackResult):
        task = result.task
        flags = (result.changed, result.duplicate, result.notify, result.duplicate_callback)
        return (result.reason, *flags, task.state, task.error)
    assert isinstance(result, EventOutcome), result
    flags = (result.changed, result.duplicate, result.notify, result.duplicate_callback)
    return (result.reason, *flags, result.state, result.error)


def _wire(result: Any) -> Any:
    return {"error": result.code} if isinstance(result, AsyncBookError) else to_wire(result)


def _each_applied(book: MemoryBook, task_id: str, items: list[Any]) -> list[Any]:
    out = []
    for item_event, callback in items:
        try:
            out.append(_outcome(book.apply(task_id, item_event, callback)))
        except AsyncBookError as error:
            out.append(_outcome(error))
    return out


def _create(book: Any, op: tuple[Any, ...]) -> Any:
    _, task_id, ttl, attempts = op
    return to_wire(
        book.create(id=task_id, now_ms=0, ttl_ms=ttl, max_attempts=attempts, exist_ok=True)
    )


BOOK_OPERATIONS: dict[str, Callable[[Any, tuple[Any, ...]], Any]] = {
    "create": _create,
    "batch": lambda book, op: [_outcome(r) for r in book.apply_many(op[1], full_task=False)],
    "expire_many": lambda book, op: [_wire(r) for r in book.expire_many(op[1], full_task=False)],
}
"""The operations both books run through their own API."""


@cache
def _execution_source() -> str:
    lua = resources.files("asyncbook.celery") / "lua" / "execution.lua"
    return lua.read_text(encoding="utf-8")


def run(books: Any, op: tuple[Any, ...]) -> Any:
    """``op`` on a Model or on Scripted."""
    if op[0] in BOOK_OPERATIONS:
        return BOOK_OPERATIONS[op[0]](books.book, op)
    return books.events(op)


class Model:
    """The pure machine's answers (a MemoryBook), and the Celery meta the script keeps."""

    def __init__(self) -> None:
        self.book = MemoryBook(retention_versions=3)
        self.metas: dict[str, str] = {}

    def events(self, op: tuple[Any, ...]) -> Any:
        book = self.book
        kind = op[0]
        task_id, items = op[1], op[2]
        if items and book.get(task_id) is None:
            return {"error": "invalid-request"}
        if kind == "run":
            pair = [item[0].get("type") for item in items]
            task = book.get(task_id)
            if pair[:1] == ["start"] and len(pair) == 2 and task and task.state == "queued":
                event("a start and an end on a queued task")
            return _each_applied(book, task_id, items)
        _, task_id, items, guard, refused, status = op
        answers = _each_applied(book, task_id, items)
        task = book.get(task_id)
        state = task.state if task is not None else ""
        stored = json.loads(self.metas[task_id]) if task_id in self.metas else None
        guarded = guard == "json" and stored is not None and stored["status"] == "SUCCESS"
        if guarded:
            event("the SUCCESS guard met a stored SUCCESS")
        if state and f"|{state}|" in refused:
            verdict = "refused"
        elif guard == "keep" or guarded:
            verdict = "kept"
        else:
            verdict = "written"
            self.metas[task_id] = _meta(task_id, status)
        return [verdict, state, answers]


def _meta(task_id: str, status: str) -> str:
    return json.dumps({"status": status, "task_id": task_id})


class Scripted:
    """The same operations on a RedisBook, through the scripts under test."""

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self.book = RedisBook(client, namespace=namespace, retention_versions=3)
        self.events_only: BookScript = self.book.events_script(EVENTS_ONLY)
        self.execution: BookScript = self.book.events_script(_execution_source())
        self.client = client

    def meta_key(self, task_id: str) -> str:
        return self.book.keys.tag + ":meta:" + task_id

    def events(self, op: tuple[Any, ...]) -> Any:
        book = self.book
        kind = op[0]
        task_id, items = op[1], op[2]
        try:
            if kind == "run":
                key = self.meta_key(task_id)
                done = book.apply_in_script(task_id, items, self.events_only, key, [])
                return [_outcome(answer) for answer in done.outcomes]
            _, task_id, items, guard, refused, status = op
            args = ExecutionArgs(_meta(task_id, status), 0, guard, refused).argv()
            done = book.apply_in_script(
                task_id, items, self.execution, self.meta_key(task_id), args
            )
        except AsyncBookError as error:
            return {"error": error.code}
        return [done.status, done.state, [_outcome(answer) for answer in done.outcomes]]

    def metas(self) -> dict[str, str]:
        found: dict[str, Any] = {t: self.client.get(self.meta_key(t)) for t in TASK_IDS}
        return {task_id: meta.decode() for task_id, meta in found.items() if meta is not None}


@pytest.fixture(scope="module")
def client() -> Iterator[redis.Redis]:
    real: redis.Redis = redis_client()
    yield real
    real.close()


def _tasks(book: Any) -> dict[str, Any]:
    return {task_id: _wire_task(book.get(task_id)) for task_id in TASK_IDS}


def _wire_task(task: Any) -> Any:
    return None if task is None else to_wire(task)


@SETTINGS
@given(ops=sequences)
@example(
    ops=(
        [("create", "a", 100, 1)],
        [
            ("run", "a", [({"type": "start", "atMs": 1, "worker": "w1"}, "c1"),
                          ({"type": "succeed", "atMs": 2, "resultRef": "r1",
                            "resultHash": "h"}, "c2")]),
        ],
    )
)  # fmt: skip
def test_every_script_path_agrees_with_the_machine(
    client: redis.Redis, ops: tuple[list[Any], list[Any]]
) -> None:
    namespace = f"paths-{uuid.uuid4().hex[:12]}"
    model, scripted = Model(), Scripted(client, namespace)
    try:
        for op in [*ops[0], *ops[1]]:
            assert run(scripted, op) == run(model, op), op
            assert _tasks(scripted.book) == _tasks(model.book), op
        drained = [to_wire(note) for note in scripted.book.drain_notifications()]
        assert drained == [to_wire(note) for note in model.book.drain_notifications()]
        assert scripted.metas() == model.metas
    finally:
        delete_namespace(client, namespace)


def test_a_start_and_an_end_with_one_callback_id_take_the_path_of_two_calls(
    client: redis.Redis,
) -> None:
    # The fused path applied both (the task succeeded, at version 2); applied one by one,
    # the end's callback id is the start's, so the end is a duplicate and changes nothing.
    namespace = f"paths-{uuid.uuid4().hex[:12]}"
    book, memory = RedisBook(client, namespace=namespace), MemoryBook()
    start = StartEvent(at_ms=1, worker="w1")
    end = SucceedEvent(at_ms=2, result_ref="r", result_hash="h")
    try:
        for each in (book, memory):
            each.create(id="a", now_ms=0, ttl_ms=10**9, max_attempts=1)
        script, meta = book.events_script(EVENTS_ONLY), book.keys.task("meta")
        book.apply_in_script("a", [(start, "c1"), (end, "c1")], script, meta, [])
        memory.apply("a", start, "c1")
        memory.apply("a", end, "c1")
        task = book.get("a")
        assert task is not None
        assert task.state == "running"
        assert _wire_task(task) == _wire_task(memory.get("a"))
    finally:
        delete_namespace(client, namespace)


BAD_START = {"type": "start", "atMs": "1", "worker": "w"}  # atMs a string: a bad shape


@pytest.mark.parametrize(
    "later",
    [
        pytest.param(("a", BAD_START, "c1"), id="a-bad-event-reusing-the-end's-callback"),
        pytest.param(("a", start(2), "c1"), id="an-event-reusing-the-end's-callback"),
        pytest.param(("b", progress(50, at=2), None), id="a-progress-after-the-end"),
        pytest.param(("b", {"type": "cancel", "atMs": 2}, None), id="a-cancel-after-the-end"),
        pytest.param(("b", expire(2), None), id="an-expire-after-the-end"),
    ],
)
def test_an_end_after_a_start_in_one_batch_keeps_its_place(
    client: redis.Redis, later: tuple[Any, Any, Any]
) -> None:
    # The end's info block lacked the worker its start (earlier in the batch) names: it
    # was refused for facts and sent again after the batch, so the events behind it ran
    # before it (Hypothesis found it: a bad event reusing the end's callback id answered
    # invalid-request instead of duplicate-callback).
    namespace = f"paths-{uuid.uuid4().hex[:12]}"
    model, scripted = Model(), Scripted(client, namespace)
    batch = [("b", start(0), None), ("b", succeed(1), "c1"), later]
    try:
        for books in (scripted, model):
            for task_id in ("a", "b"):
                books.book.create(id=task_id, now_ms=0, ttl_ms=50, max_attempts=1)
        assert run(scripted, ("batch", batch)) == run(model, ("batch", batch))
        assert _tasks(scripted.book) == _tasks(model.book)
    finally:
        delete_namespace(client, namespace)


def test_a_retried_execution_in_one_batch_agrees_with_the_machine(client: redis.Redis) -> None:
    # As the Celery recorder batches a task retried at once: each end needs the worker of
    # the start before it in the batch (before, the fail and the success were refused for
    # facts, the second start ran first, and the task ended queued, not succeeded).
    namespace = f"paths-{uuid.uuid4().hex[:12]}"
    model, scripted = Model(), Scripted(client, namespace)
    batch = [
        ("a", start(1, "w1"), "s0"),
        ("a", progress(40, at=2), "p40"),
        ("a", {"type": "fail", "atMs": 3, "error": "lost", "retryable": True}, "r0"),
        ("a", start(4, "w2"), "s1"),
        ("a", succeed(5), "d"),
    ]
    try:
        for books in (scripted, model):
            books.book.create(id="a", now_ms=0, ttl_ms=50, max_attempts=2)
        assert run(scripted, ("batch", batch)) == run(model, ("batch", batch))
        assert _tasks(scripted.book) == _tasks(model.book)
    finally:
        delete_namespace(client, namespace)
