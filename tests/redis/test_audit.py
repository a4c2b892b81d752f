"""The audit trail's keys in Redis: the namespace's log is capped, a task's list lives as
long as the task's record, and both carry the namespace's hash tag."""

from __future__ import annotations

from asyncbook import RedisBook


def test_the_namespace_log_is_capped(book: RedisBook) -> None:
    book.layout.audit_entries = 50
    book.create(id="t", now_ms=book.now_ms(), ttl_ms=60_000, max_attempts=1)
    for n in range(600):
        book.record_audit("t", "retry", f"user-{n}", None, "ok")
    # MAXLEN ~ trims whole stream nodes (100 entries each by default): near the cap.
    assert book.client.xlen(book.keys.audit_log) <= 50 + 100
    newest = book.audit(limit=1000)
    assert newest[0].actor == "user-599"
    assert len(newest) <= 150


def test_a_task_s_entries_expire_with_its_record(book: RedisBook) -> None:
    book.create(id="t", now_ms=book.now_ms(), ttl_ms=60_000, max_attempts=1)
    book.cancel("t", "why", actor="cli:ann")
    record_ttl = book.client.pttl(book.keys.task("t"))
    audit_ttl = book.client.pttl(book.keys.task_audit("t"))
    assert record_ttl > 0
    assert abs(audit_ttl - record_ttl) < 1000
    assert book.keys.task_audit("t").startswith(book.keys.tag)
    assert book.keys.audit_log.startswith(book.keys.tag)
