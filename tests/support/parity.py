"""Parity: seeded sequences of book calls, each a method name with its arguments, run by
name through a facade (``MemoryBook``, ``RedisBook``, ``AsyncRedisBook``) so that every
facade on every layout can be held to the in-memory book's answers and notifications.

A step is ``(method, args, kwargs)``. The sequences cover groups (members, seals, reads,
group notifications), callback ids of the task's own and derived from another task's id
(``<other>:1``, ``celery:<other>:success:0``: claimed in a foreign shard), callback ids
delivered again, cancels (audited with an actor; many at once, ``cancel_many``),
expiries, retryable failures (the reference's events, ``reference_cases.random_event``),
deliveries under repeated and foreign idempotency keys, the audit, and the reads. Every
time is given (``now_ms``, ``at_ms``; but some of ``cancel_many``'s), so that no answer
depends on a clock but where ``normalised`` says.

The asyncio facade runs each step's coroutine on the sequence's event loop. A method
``AsyncRedisBook`` lacks runs through a ``RedisBook`` of the same namespace instead:
``ASYNC_FALLBACKS`` names them (a test expects it empty: the asyncio facade offers the
whole surface) and ``FALLEN_BACK`` records those a run used.
"""

from __future__ import annotations

import asyncio
import inspect
import random
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from asyncbook import AsyncBookError, CreateSpec, to_wire
from asyncbook.redis import AsyncRedisBook

from .reference_cases import random_event, random_time

__all__ = [
    "ASYNC_FALLBACKS",
    "FALLEN_BACK",
    "SURFACE",
    "AsyncFacade",
    "Step",
    "assert_parity",
    "normalised",
    "parity_batch",
    "run_async_steps",
    "run_steps",
    "sync_facade",
]

Step = tuple[str, tuple[Any, ...], dict[str, Any]]
"""One call: the method's name, its positional and its keyword arguments."""
Facade = Callable[[str, tuple[Any, ...], dict[str, Any]], Any]
"""Runs one step on a book and returns the method's answer (raising its error)."""

TASK_IDS = ["a", "b", "c", "\U0001f600", "x:{y}"]
GROUPS = ["g1", "g2", "ü"]
OWN_CALLBACK_IDS = ["c1", "c2", "c3", ""]
KEYS = ["k1", "k2", " ", "a:k", "b:k", "c:k", "x:{y}:k"]
ACTORS = ["ops", "cli:ann"]
OUTPUT_TASK = "out"
OUTPUT_START: list[Step] = [
    ("create", (), {"id": OUTPUT_TASK, "now_ms": 0, "ttl_ms": 10**6, "max_attempts": 2}),
    ("apply", (OUTPUT_TASK, {"type": "start", "atMs": 1, "worker": "w"}), {}),
]
CHUNKS = ["tok ", "ü\n", "\U0001f600", "", "x" * 70_000]
"""Output chunks: text, then an empty one and one over the bound (both refused)."""
STATES = [None, "queued", "running", "succeeded", "failed", "cancelled", "expired"]

SURFACE = (
    "create",
    "create_many",
    "get",
    "apply",
    "apply_many",
    "cancel",
    "cancel_many",
    "expire",
    "expire_many",
    "seal_group",
    "group",
    "group_members",
    "resume",
    "deliver_result",
    "record_audit",
    "audit",
    "drain_notifications",
    "drain_group_notifications",
    "overdue",
    "overdue_count",
    "heartbeat",
    "last_cursor",
    "list_tasks",
    "count_by_state",
    "transition_counts",
    "append_output",
    "output",
)
"""Every method a sequence calls."""

ASYNC_FALLBACKS = [name for name in SURFACE if not callable(getattr(AsyncRedisBook, name, None))]
"""The methods ``AsyncRedisBook`` lacks: the asyncio facade runs them through a
``RedisBook`` of the same namespace."""
FALLEN_BACK: set[str] = set()
"""The methods an asyncio run did run through the sync book (a subset of the above)."""

WEIGHTS = {
    "create": 3,
    "create_many": 1,
    "apply": 12,
    "redeliver": 2,
    "apply_many": 2,
    "cancel": 4,
    "cancel_many": 2,
    "expire": 1,
    "expire_many": 1,
    "seal_group": 3,
    "group": 1,
    "group_members": 1,
    "resume": 2,
    "deliver_result": 3,
    "record_audit": 1,
    "audit": 1,
    "drain_notifications": 2,
    "drain_group_notifications": 2,
    "get": 1,
    "overdue": 1,
    "overdue_count": 1,
    "heartbeat": 1,
    "last_cursor": 1,
    "list_tasks": 1,
    "count_by_state": 1,
    "transition_counts": 1,
    "append_output": 3,
    "output": 2,
}


class _Draft:
    """One sequence being drawn: which tasks and group members it created so far."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.created: list[str] = []
        self.members: dict[str, int] = {}
        self.applied: list[Step] = []

    def task(self) -> str:
        """Most steps name a created task (so callback ids meet other tasks)."""
        if self.created and self.rng.random() < 0.85:
            return self.rng.choice(self.created)
        return self.rng.choice(TASK_IDS)

    def callback(self, task_id: str) -> str | None:
        """None, an id of its own, one derived from the task's id, or from another's."""
        rng = self.rng
        roll = rng.random()
        if roll < 0.3:
            return None
        if roll < 0.55:
            return rng.choice(OWN_CALLBACK_IDS)
        other = rng.choice([task for task in TASK_IDS if task != task_id])
        owner = task_id if roll < 0.65 else other  # mostly a foreign task's id
        return rng.choice([f"{owner}:{rng.randint(1, 2)}", f"celery:{owner}:success:0"])

    def spec(self) -> CreateSpec:
        rng = self.rng
        task_id = rng.choice(TASK_IDS)
        group = rng.choice(GROUPS) if rng.random() < 0.6 else None
        timeout = rng.choice([None, None, 1_000_000])
        spec = CreateSpec(
            id=task_id,
            now_ms=rng.randint(0, 20),
            ttl_ms=rng.choice([50, 100, 150]),
            max_attempts=rng.randint(1, 3),
            exist_ok=rng.random() < 0.2,
            heartbeat_timeout_ms=timeout,
            retry_on_stall=timeout is not None and rng.random() < 0.5,
            group_id=group,
        )
        if task_id not in self.created:
            self.created.append(task_id)
            if group is not None:
                self.members[group] = self.members.get(group, 0) + 1
        return spec

    def apply_item(self) -> tuple[str, dict[str, Any], str | None]:
        task_id = self.task()
        if self.rng.random() < 0.1:
            at = random_time(self.rng)
            return task_id, {"type": "cancel", "atMs": at, "reason": "r"}, self.callback(task_id)
        return task_id, random_event(self.rng), self.callback(task_id)

    def step(self, kind: str) -> Step:
        rng = self.rng
        if kind == "create":
            return ("create", (), self.spec()._asdict())
        if kind == "create_many":
            return ("create_many", ([self.spec() for _ in range(rng.randint(1, 3))],), {})
        if kind == "apply":
            step: Step = ("apply", self.apply_item(), {})
            self.applied.append(step)
            return step
        if kind == "redeliver":  # the same event under the same callback id, again
            return rng.choice(self.applied) if self.applied else self.step("apply")
        if kind == "apply_many":
            items = [self.apply_item() for _ in range(rng.randint(1, 3))]
            return ("apply_many", (items,), {"full_task": rng.random() < 0.5})
        if kind == "cancel":
            task_id = self.task()
            kwargs = {
                "at_ms": random_time(rng),
                "callback_id": self.callback(task_id),
                "actor": rng.choice([None, *ACTORS]),
            }
            return ("cancel", (task_id, rng.choice([None, "stop", ""])), kwargs)
        if kind == "cancel_many":  # unknown, bad and repeated ids among them
            ids: list[Any] = [self.task() for _ in range(rng.randint(1, 4))]
            ids += rng.choice([[], [], ["nope"], [7], ids[:1]])
            kwargs = {"actor": rng.choice(ACTORS), "reason": rng.choice([None, "stop", ""])}
            if rng.random() < 0.8:
                kwargs["at_ms"] = random_time(rng)
            return ("cancel_many", (ids,), kwargs)
        if kind == "expire":
            return ("expire", (self.task(),), {})
        if kind == "expire_many":
            ids = [self.task() for _ in range(rng.randint(1, 3))]
            return ("expire_many", (ids,), {"full_task": rng.random() < 0.5})
        if kind == "seal_group":
            group = rng.choice(GROUPS)
            total = max(1, self.members.get(group, 0) + rng.choice([0, 0, 0, 1, -1]))
            return ("seal_group", (group, total), {})
        if kind in ("group", "group_members"):
            return (kind, (rng.choice(GROUPS),), {})
        if kind == "resume":
            return ("resume", (self.task(), rng.randint(-1, 8)), {"full_task": rng.random() < 0.5})
        if kind == "deliver_result":
            return ("deliver_result", (self.task(), rng.choice(KEYS), rng.randint(0, 200)), {})
        if kind == "record_audit":
            action = rng.choice(["cancel", "retry"])
            args = (self.task(), action, rng.choice(ACTORS), rng.choice([None, "why"]), "retried")
            return ("record_audit", args, {})
        if kind == "audit":
            return ("audit", (rng.choice([None, self.task()]),), {"limit": rng.randint(1, 20)})
        if kind in ("get", "last_cursor"):
            return (kind, (self.task(),), {})
        if kind in ("overdue", "overdue_count"):
            return (kind, (rng.randint(0, 200),), {})
        if kind == "heartbeat":
            return ("heartbeat", ([self.task() for _ in range(rng.randint(1, 3))],), {})
        if kind == "list_tasks":
            return ("list_tasks", (rng.choice(STATES), rng.randint(1, 6)), {"full_task": False})
        if kind == "append_output":
            chunks = rng.sample(CHUNKS[:3], rng.randint(1, 3))
            if rng.random() < 0.1:  # none, or a refused one: nothing is written
                chunks = rng.choice([[], [*chunks, rng.choice(CHUNKS[3:])]])
            task_id = OUTPUT_TASK if rng.random() < 0.7 else self.task()
            return ("append_output", (task_id, *chunks), {})
        if kind == "output":
            task_id = OUTPUT_TASK if rng.random() < 0.7 else self.task()
            return ("output", (task_id, rng.randint(0, 6), rng.randint(1, 3)), {})
        return (kind, (), {})


def parity_sequence(rng: random.Random, length: int) -> list[Step]:
    """A few tasks created (some in groups), ``length`` steps, then the final reads: every
    notification drained, the whole audit and the counts."""
    draft = _Draft(rng)
    steps = [draft.step("create") for _ in range(rng.randint(2, 4))]
    steps += OUTPUT_START  # a task that runs long enough to write output
    kinds, weights = list(WEIGHTS), list(WEIGHTS.values())
    steps += [draft.step(rng.choices(kinds, weights)[0]) for _ in range(length)]
    steps += [
        ("drain_notifications", (), {}),
        ("drain_group_notifications", (), {}),
        ("audit", (None,), {"limit": 100}),
        ("count_by_state", (), {}),
    ]
    return steps


def parity_batch(seed: int, count: int, length: int) -> list[list[Step]]:
    """``count`` sequences of ``length`` steps from ``seed`` (the same seed, the same batch)."""
    rng = random.Random(seed)
    return [parity_sequence(rng, length) for _ in range(count)]


CLOCK_FROM = 10**12
"""A time at or after this (2001) came from a book's clock, never from a step's argument."""


def normalised(step: Step, answer: Any) -> Any:
    """The one place where a facade may legitimately answer otherwise than ``MemoryBook``:

    - a time read from a book's clock (an audit entry's ``atMs``; a group notification's
      when ``seal_group`` ended the group) is the server's on Redis and the process's in
      memory: any ``atMs`` at or after ``CLOCK_FROM`` becomes ``"clock"``;
    - ``list_tasks``'s ``nextAfter`` is each book's own opaque cursor (the in-memory
      book's creation number, Redis's score and id): only whether there is one counts;
    - a sharded namespace drains its group notifications shard by shard, not in the
      order the groups ended across shards: a drain is compared sorted by group id
      (each group is notified once);
    - the whole book's audit (``audit(None)``) of a sharded namespace merges each
      shard's log by that clock, so entries of the same millisecond may come in another
      order: it is compared as a sorted list.
    """
    answer = _clock_free(answer)
    name, args, _ = step
    if name == "audit" and args[0] is None and isinstance(answer, list):
        return sorted(answer, key=repr)
    if name == "drain_group_notifications" and isinstance(answer, list):
        return sorted(answer, key=lambda note: note["groupId"])
    if name == "list_tasks" and isinstance(answer, dict) and answer.get("nextAfter"):
        return {**answer, "nextAfter": "cursor"}
    return answer


def _clock_free(value: Any) -> Any:
    if isinstance(value, list):
        return [_clock_free(item) for item in value]
    if isinstance(value, dict):
        return {
            key: "clock"
            if key == "atMs" and isinstance(item, int) and item >= CLOCK_FROM
            else _clock_free(item)
            for key, item in value.items()
        }
    return value


def _wire(value: Any) -> Any:
    """An answer as JSON: models in their wire form, errors by class, code and field."""
    if isinstance(value, BaseModel):
        return to_wire(value)
    if isinstance(value, AsyncBookError):
        return {"error": type(value).__name__, "code": value.code, "field": value.field}
    if isinstance(value, list | tuple):
        return [_wire(item) for item in value]
    if isinstance(value, dict):
        return {key: _wire(item) for key, item in value.items()}
    return value


def run_steps(facade: Facade, steps: list[Step]) -> list[Any]:
    """Every step's answer (or the error it raised), as JSON, normalised."""
    answers = []
    for step in steps:
        name, args, kwargs = step
        try:
            answer = _wire(facade(name, args, kwargs))
        except AsyncBookError as error:
            answer = _wire(error)
        answers.append(normalised(step, answer))
    return answers


def sync_facade(book: Any) -> Facade:
    """A sync book's method, called by name."""

    def call(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return getattr(book, name)(*args, **kwargs)

    return call


class AsyncFacade:
    """An ``AsyncRedisBook``'s method, called by name and awaited on ``loop``; a method it
    lacks runs through ``fallback`` (a ``RedisBook`` of the same namespace) and is noted
    in ``FALLEN_BACK``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, book: Any, fallback: Any) -> None:
        self.loop, self.book, self.fallback = loop, book, fallback

    def __call__(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        method = getattr(self.book, name, None)
        if method is None:
            FALLEN_BACK.add(name)
            return getattr(self.fallback, name)(*args, **kwargs)
        answer = method(*args, **kwargs)
        return self.loop.run_until_complete(answer) if inspect.isawaitable(answer) else answer


def run_async_steps(open_book: Callable[[], Any], fallback: Any, steps: list[Step]) -> list[Any]:
    """``run_steps`` through an asyncio book that ``open_book`` makes in a new event loop
    (one loop per sequence), closed afterwards."""
    loop = asyncio.new_event_loop()

    async def opened() -> Any:
        return open_book()

    try:
        book = loop.run_until_complete(opened())
        try:
            return run_steps(AsyncFacade(loop, book, fallback), steps)
        finally:
            loop.run_until_complete(book.aclose())
    finally:
        loop.close()


def assert_parity(
    kind: str, sequences: list[list[Step]], got: list[list[Any]], want: list[list[Any]]
) -> None:
    """Every answer equal to ``MemoryBook``'s; else name each sequence that differs (its
    first such step, the steps before it and both answers: the first three in full, then
    the steps' names)."""
    failures: list[list[str]] = []
    for number, (steps, mine, theirs) in enumerate(zip(sequences, got, want, strict=True)):
        for at, (answer, expected) in enumerate(zip(mine, theirs, strict=True)):
            if answer == expected:
                continue
            lines = [f"{kind}: sequence {number} differs from MemoryBook at step {at}:"]
            if len(failures) < 3:
                lines += [f"  {n}: {step!r}" for n, step in enumerate(steps[: at + 1])]
                lines += [f"  {kind}: {answer!r}", f"  MemoryBook: {expected!r}"]
            else:
                lines[0] += f" {steps[at][0]}"
            failures.append(lines)
            break
    if failures:
        raise AssertionError("\n".join(line for lines in failures for line in lines))
