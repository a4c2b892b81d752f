"""A scripted life of one task on the in-memory book (``asyncbook walkthrough``)."""

from __future__ import annotations

import json
from collections.abc import Callable

from ._book import AsyncBook
from ._memory import MemoryBook
from ._models import AsyncEvent, FailEvent, ProgressEvent, StartEvent, SucceedEvent, to_wire

__all__ = ["walk"]


def walk(book: AsyncBook, out: Callable[[str], None] = print) -> None:
    """Print one task's life: every step, the reason the book gave, and the state after."""

    def step(label: str, reason: str, state: str, version: int) -> None:
        out(f"  {label:<44} -> {reason:<19} state={state:<9} v{version}")

    task = book.create(id="render-42", now_ms=0, ttl_ms=60_000, max_attempts=2)
    out(f"created {task.id!r}: queued, deadline {task.expires_at_ms} ms, 2 attempts")
    steps: list[tuple[str, AsyncEvent, str]] = [
        ("worker-a starts attempt 1", StartEvent(at_ms=1_000, worker="worker-a"), "celery:start:0"),
        (
            "progress 40% (cursor chunk-4)",
            ProgressEvent(at_ms=2_000, progress=40, cursor="chunk-4"),
            "p40",
        ),
        (
            "GPU lost: retryable failure",
            FailEvent(at_ms=3_000, error="gpu lost", retryable=True),
            "f0",
        ),
        ("worker-b starts attempt 2", StartEvent(at_ms=4_000, worker="worker-b"), "celery:start:1"),
        ("progress 90%", ProgressEvent(at_ms=5_000, progress=90, cursor="chunk-9"), "p90"),
        (
            "success: s3://renders/42.png",
            SucceedEvent(at_ms=6_000, result_ref="s3://renders/42.png", result_hash="sha256:9f2c"),
            "celery:success:1",
        ),
        (
            "the same success callback, redelivered",
            SucceedEvent(at_ms=6_500, result_ref="s3://renders/42.png", result_hash="sha256:9f2c"),
            "celery:success:1",
        ),
    ]
    for label, event, callback_id in steps:
        result = book.apply(task.id, event, callback_id)
        step(label, result.reason, result.task.state, result.task.version)

    for note in book.drain_notifications():
        out(f"notification: {json.dumps(to_wire(note))}")
    resume = book.resume(task.id, 3)
    versions = [entry.version for entry in resume.events]
    out(f"client reconnects with cursor 3: {resume.mode}, versions {versions}")
    far = book.resume(task.id, 0)
    out(f"client reconnects with cursor 0: {far.mode} (task at v{far.task.version})")
    for attempt in (1, 2):
        delivery = book.deliver_result(task.id, "order-7", now_ms=7_000 + attempt)
        receipt = to_wire(delivery.receipt) if delivery.receipt else None
        out(f"delivery #{attempt} with key order-7: {delivery.reason} {json.dumps(receipt)}")
    final = book.get(task.id)
    assert final is not None
    out("history:")
    for entry in final.history:
        out(f"  v{entry.version} {json.dumps(to_wire(entry.event))}")


def main() -> None:
    """Run the walk-through on a fresh in-memory book."""
    print("asyncbook walk-through (in-memory book)")
    walk(MemoryBook(retention_versions=3))


if __name__ == "__main__":
    main()
