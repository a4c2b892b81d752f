"""Seeded random operation sequences for the differential test against the reference
itself (``reference_node``), in the runner's format (``operations.run_operation``), with the
edge values the reference accepts: empty and blank ids, keys and callback ids (blank as
JavaScript's ``trim()`` sees it: U+FEFF is blank, U+001C and U+0085 are not), non-ASCII,
floats (``40.0`` is an integer, ``40.5`` is not; ``ttl 0.5``), negative times.

The one deviation of docs/spec.md is avoided: a valid ``create`` of an id already created
is never generated (the reference replaces the task, asyncbook raises ``conflict``); an
invalid one is, as both refuse it. ``cancel`` (an extension the reference lacks) is left
out. The whole batch goes to node at once; a mismatch names its sequence and operation.
"""

from __future__ import annotations

import json
import math
import random
from typing import Any

from asyncbook import AsyncBookError, to_wire
from asyncbook._jsrules import is_blank

__all__ = [
    "ASYNC_OPERATIONS",
    "RETENTION_VERSIONS",
    "assert_same",
    "batch",
    "driver_ops",
    "random_event",
    "random_time",
    "reference_ops",
    "run_async_operation",
]

RETENTION_VERSIONS = 3

TASK_IDS = ["a", "b", "\U0001f600", "x:{y}", "ünï/42", "\x1c", "\u0085", "", " ", "\ufeff"]
"""Most are ids; the last three are blank (an error at create, unknown elsewhere)."""
CALLBACK_IDS = [
    "",
    "",
    " ",
    "\ufeff",
    "c1",
    "c2",
    "c3",
    "a:c",
    "b:c",
    "x:{y}:2",
    "\U0001f600:1",
    "celery:b:success:0",
    "ü",
]
"""The empty id twice as often: a callback id like any other, global on every layout."""
KEYS = ["k1", "k2", "", " ", "\ufeff", "\x1c", "\u0085", "a:k", "b:k", "ü:k", "\u3000"]
TIMES: list[Any] = [0.5, 99.5, -1, 100.0, -0.0, 0.001, 159.75, -0.5, 1e300]
TEXTS = ["", " ", "r1", "r2", "h1", "h2", "\u3000", "\ufeff", "ü"]


def random_time(rng: random.Random) -> Any:
    return rng.randint(0, 160) if rng.random() < 0.8 else rng.choice(TIMES)


def random_event(rng: random.Random) -> dict[str, Any]:
    kind = rng.choice(["start", "start", "progress", "progress", "succeed", "fail", "expire"])
    at = random_time(rng)
    if rng.random() < 0.02:
        return {"type": "start", "atMs": "1", "worker": "w"}
    if kind == "start":
        return {"type": "start", "atMs": at, "worker": rng.choice(["w1", "w2", "", "ü"])}
    if kind == "progress":
        value: Any = rng.randint(0, 100)
        if rng.random() < 0.3:
            value = rng.choice([40.0, 40.5, 101, -1, 100.0, 0.0, 1e300, 12.5])
        return {
            "type": "progress",
            "atMs": at,
            "progress": value,
            "cursor": rng.choice(["", "k", "ü"]),
        }
    if kind == "succeed":
        return {
            "type": "succeed",
            "atMs": at,
            "resultRef": rng.choice(TEXTS),
            "resultHash": rng.choice(TEXTS),
        }
    if kind == "fail":
        return {
            "type": "fail",
            "atMs": at,
            "error": rng.choice(["oom", "", "ü"]),
            "retryable": rng.random() < 0.6,
        }
    return {"type": "expire", "atMs": at}


def _valid_create(task_id: str, now: Any, ttl: Any, attempts: Any) -> bool:
    """Whether ``create`` takes these (so that a second one would overwrite)."""
    return (
        not is_blank(task_id)
        and math.isfinite(now)
        and now >= 0
        and math.isfinite(ttl)
        and ttl > 0
        and float(attempts).is_integer()
        and attempts >= 1
    )


def _create(rng: random.Random, task_id: str) -> tuple[Any, ...]:
    now: Any = rng.randint(0, 20) if rng.random() < 0.8 else rng.choice([2.5, -1, -0.0])
    ttl = rng.choice([50, 100, 100, 150, 0, -1, 0.5, 100.25])
    attempts = rng.choice([1, 2, 3, 3, 0, 1.0, 2.5])
    return ("create", task_id, now, ttl, attempts, False)


def reference_ops(rng: random.Random, length: int = 40) -> list[tuple[Any, ...]]:
    """One sequence: a few tasks created, then ``length`` operations at most."""
    ops: list[tuple[Any, ...]] = []
    created: set[str] = set()
    for task_id in rng.sample(TASK_IDS[:6], rng.randint(1, 3)):
        ops.append(("create", task_id, 0, 100, rng.randint(1, 3), False))
        created.add(task_id)
    while len(ops) < length:
        kind = rng.choices(
            ["create", "apply", "expire", "resume", "deliver", "get", "drain"],
            [3, 14, 1, 3, 4, 1, 1],
        )[0]
        task_id = rng.choice(TASK_IDS)
        if kind != "create" and created and rng.random() < 0.7:
            task_id = rng.choice(sorted(created))  # most operations find their task
        if kind == "create":
            op = _create(rng, task_id)
            if _valid_create(*op[1:5]):
                if task_id in created:
                    continue  # the deviation: the reference would overwrite it
                created.add(task_id)
            ops.append(op)
        elif kind == "apply":
            callback = None if rng.random() < 0.45 else rng.choice(CALLBACK_IDS)
            ops.append(("apply", task_id, random_event(rng), callback))
        elif kind == "expire":
            ops.append(("expire", task_id))
        elif kind == "resume":
            cursor: Any = (
                rng.randint(-1, 12) if rng.random() < 0.85 else rng.choice([2.0, 1.5, "1"])
            )
            ops.append(("resume", task_id, cursor))
        elif kind == "deliver":
            now: Any = rng.randint(0, 200) if rng.random() < 0.9 else rng.choice([-1, 0.5])
            ops.append(("deliver", task_id, rng.choice(KEYS), now))
        elif kind == "get":
            ops.append(("get", task_id))
        else:
            ops.append(("drain",))
    ops.append(("drain",))
    return ops


def batch(seed: int, count: int, length: int = 40) -> list[list[tuple[Any, ...]]]:
    """``count`` sequences from ``seed`` (the same seed, the same batch)."""
    rng = random.Random(seed)
    return [reference_ops(rng, rng.randint(1, length)) for _ in range(count)]


def driver_ops(ops: list[tuple[Any, ...]]) -> list[list[Any]]:
    """The sequence as reference_driver.mjs reads it (``create`` has no ``exist_ok``)."""
    return [list(op[:5]) if op[0] == "create" else list(op) for op in ops]


def as_json(answer: Any) -> Any:
    """An answer as it reads back from JSON (tuples become lists)."""
    return json.loads(json.dumps(answer))


def assert_same(
    kind: str, sequences: list[list[tuple[Any, ...]]], got: list[list[Any]], want: list[Any]
) -> None:
    """Every answer equal to the reference's, else name the first sequence that differs,
    its operations up to the first differing one, and both answers."""
    for number, (ops, mine, theirs) in enumerate(zip(sequences, got, want, strict=True)):
        mine = as_json(mine)
        if mine == theirs:
            continue
        at = next(n for n, (a, b) in enumerate(zip(mine, theirs, strict=True)) if a != b)
        lines = [f"{kind}: sequence {number} differs from the reference at operation {at}:"]
        lines += [f"  {n}: {op!r}" for n, op in enumerate(ops[: at + 1])]
        lines += [f"  asyncbook: {mine[at]!r}", f"  reference: {theirs[at]!r}"]
        raise AssertionError("\n".join(lines))


ASYNC_OPERATIONS = ("get", "resume", "deliver")
"""What ``AsyncRedisBook`` offers of the reference's surface (its writes are the workers')."""


async def run_async_operation(book: Any, op: tuple[Any, ...]) -> Any:
    """``operations.run_operation`` for an ``AsyncRedisBook``'s get, resume and deliver."""
    kind = op[0]
    try:
        if kind == "get":
            task = await book.get(op[1])
            return None if task is None else to_wire(task)
        if kind == "resume":
            return to_wire(await book.resume(op[1], op[2]))
        if kind == "deliver":
            return to_wire(await book.deliver_result(op[1], op[2], op[3]))
    except AsyncBookError as error:
        return {"error": error.code}
    raise AssertionError(f"not an asyncio operation: {kind}")
