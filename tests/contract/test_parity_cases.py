"""Sequences the long parity run met (``test_parity``), each reduced to its few steps and
held on every layout and facade: the Redis book answers them as ``MemoryBook``."""

from __future__ import annotations

from typing import Any

import pytest

from asyncbook import CreateSpec

from ..support.events import start
from ..support.parity import Step
from .test_parity import FACADES, LAYOUTS, check_sequences


def _create(task_id: str, group: str | None = None, **more: Any) -> Step:
    spec = CreateSpec(id=task_id, now_ms=0, ttl_ms=150, max_attempts=1, group_id=group, **more)
    return ("create", (), spec._asdict())


_FINAL: list[Step] = [
    ("drain_notifications", (), {}),
    ("drain_group_notifications", (), {}),
    ("audit", (None,), {"limit": 100}),
    ("count_by_state", (), {}),
]

CASES: dict[str, list[Step]] = {
    # Seed 1796578207, sequence 85: x's second create stored nothing, yet the book kept
    # its spec's group as x's; x's start was refused for facts and sent again after the
    # batch, behind c's expiry, which so took the callback id first.
    "a-create-that-stored-nothing-then-a-batch": [
        _create("x", "g1"),
        _create("x", "g2"),
        _create("c"),
        (
            "apply_many",
            ([("x", start(74, "w2"), "k"), ("c", {"type": "expire", "atMs": 41}, "k")],),
            {"full_task": False},
        ),
    ],
    # Seed 2007, sequence 96: a create_many's second create of a stored nothing, yet
    # the book forgot a's facts; expire_many sent a's expiry again after b's, which so
    # notified the group first, at its own deadline.
    "a-repeated-create-then-expire-many": [
        (
            "create_many",
            (
                [
                    CreateSpec(id="a", now_ms=0, ttl_ms=150, max_attempts=1, group_id="g"),
                    CreateSpec(id="a", now_ms=9, ttl_ms=50, max_attempts=1, group_id="g"),
                ],
            ),
            {},
        ),
        (
            "create",
            (),
            CreateSpec(id="b", now_ms=7, ttl_ms=150, max_attempts=1, group_id="g")._asdict(),
        ),
        ("seal_group", ("g", 1), {}),
        ("expire_many", (["a", "b"],), {"full_task": True}),
    ],
    # Seed 1001, sequence 112 (four shards): b's event claimed the callback id in x's
    # shard, its home, before x's earlier event of the same id, waiting for its shard's
    # part of the batch, marked it there (x and b live in different shards of four and
    # of sixteen).
    "an-id-claimed-across-shards-before-its-homes-earlier-event": [
        _create("x"),
        _create("b"),
        ("apply_many", ([("x", start(5), "x:1"), ("b", start(6), "x:1")],), {}),
    ],
    # Seed 1002, sequence 73 (four shards): the group's home shard wrote its
    # notification itself when sealed, counting only its own ended member (y lives in
    # g1's home shard of four and of sixteen, x in another).
    "a-group-sealed-after-members-of-two-shards-ended": [
        _create("y", "g1"),
        _create("x", "g1"),
        ("expire_many", (["x", "y"],), {"full_task": False}),
        ("seal_group", ("g1", 1), {}),
    ],
    # Seed 1002, sequence 230: a late cancel expires its task; the group was notified
    # at the task's deadline, not at the cancel's time.
    "a-late-cancel-ends-a-group": [
        _create("x", "g"),
        ("seal_group", ("g", 1), {}),
        ("cancel", ("x", ""), {"at_ms": 400, "callback_id": None, "actor": None}),
    ],
    # Seed 1002, sequences 150 and 268: a's event claimed the id in another shard, then
    # failed (a bad event, an unknown task) and released it only after the batch: c's
    # event found it taken.
    "an-id-claimed-by-an-event-that-fails": [
        _create("x"),
        _create("b"),
        (
            "apply_many",
            ([("x", {"type": "start", "atMs": "1"}, "k"), ("b", start(6), "k")],),
            {},
        ),
        ("apply_many", ([("a", start(7), "k2"), ("x", start(8), "k2")],), {}),
    ],
    # Several members of one group ended by one batch, on different shards: the
    # notification is that of the end that reached the total (its time, its counts).
    "members-of-one-group-ended-by-one-batch-on-several-shards": [
        _create("x", "g"),
        _create("b", "g"),
        _create("u", "g"),
        ("seal_group", ("g", 2), {}),
        (
            "apply_many",
            (
                [
                    ("x", {"type": "cancel", "atMs": 10, "reason": "r"}, None),
                    ("b", {"type": "cancel", "atMs": 20, "reason": "r"}, None),
                    ("u", {"type": "cancel", "atMs": 30, "reason": "r"}, None),
                ],
            ),
            {},
        ),
        ("expire_many", (["x", "b", "u"],), {}),
    ],
}


@pytest.mark.parametrize("facade", FACADES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", CASES)
def test_the_case_answers_as_the_memory_book(
    request: pytest.FixtureRequest, case: str, layout: str, facade: str
) -> None:
    check_sequences(request, layout, facade, case, [CASES[case] + _FINAL])
