"""``asyncbook.celery.cancel(app, id, actor=...)``: the cancel is audited with its actor;
without one, as before, it is not."""

from __future__ import annotations

from asyncbook import MemoryBook
from asyncbook.celery import cancel, install, uninstall

from ..support.celery import memory_app


def test_cancel_through_celery_records_its_actor() -> None:
    app = memory_app("audit")
    book = MemoryBook()
    install(app, book)
    try:
        for task_id in ("a", "b"):
            book.create(id=task_id, now_ms=book.now_ms(), ttl_ms=60_000, max_attempts=1)
        assert cancel(app, "a", "not needed", actor="billing-service").reason == "cancelled"
        assert cancel(app, "b").reason == "cancelled"
    finally:
        uninstall(app)
    assert [(e.actor, e.task_id, e.reason) for e in book.audit()] == [
        ("billing-service", "a", "not needed")
    ]
