"""A resend on the audit trail: resend.lua writes the original's entry in the call that
decides (who, why, the outcome and the new task), a refusal the reads tell is recorded
too, and an unknown task or a retry that names nobody writes none."""

from __future__ import annotations

import threading

import pytest

from asyncbook import RedisBook
from asyncbook.redis import claim_resends

from ..support.retries import ended_task, kept_message, script_calls

pytestmark = pytest.mark.redis


def test_a_retry_writes_its_entry_in_the_retry_call(book: RedisBook) -> None:
    ended_task(book, "t", message=kept_message())
    # Loaded first: on a server that never ran it, NOSCRIPT would add the EVAL again (this
    # test passed only when another ran resend.lua before it on the same server).
    book.engine.slot_client().script_load(book.engine.scripts.resend.source)
    with script_calls() as shas:
        [claim] = claim_resends(book.engine, ["t"], actor="token:operator", reason="upstream back")
    resend = book.engine.scripts.resend  # by FCALL (EVALSHA where no functions)
    assert shas in ([resend.function.decode()], [resend.sha])  # no separate audit.lua call
    [entry] = book.audit("t")
    assert (entry.actor, entry.action, entry.task_id) == ("token:operator", "resend", "t")
    assert (entry.reason, entry.outcome, entry.retried_as) == (
        "upstream back",
        "retried",
        claim.new_id,
    )
    assert book.audit() == [entry]  # the namespace's log too
    assert book.audit(claim.new_id) == []  # the original's trail, not the new task's
    wire = entry.model_dump(mode="json")
    assert wire["retriedAs"] == claim.new_id


def test_a_cancel_s_entry_keeps_its_shape(book: RedisBook) -> None:
    book.create(id="c", now_ms=book.now_ms(), ttl_ms=60_000, max_attempts=1)
    book.cancel("c", "stop", actor="ops")
    [entry] = book.audit("c")
    assert "retriedAs" not in entry.model_dump(mode="json")
    assert entry.retried_as is None


def test_every_retry_at_once_is_recorded_with_the_one_new_task(book: RedisBook) -> None:
    ended_task(book, "t", message=kept_message())
    start = threading.Barrier(6)

    def retry() -> None:
        start.wait()
        claim_resends(book.engine, ["t"], actor="ops", reason="double click")

    threads = [threading.Thread(target=retry) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    entries = book.audit("t")
    assert len(entries) == 6
    [created] = [e.retried_as for e in entries if e.outcome == "retried"]
    assert created is not None
    # Refused by the script or by the reads alike: each names the retry that was made.
    assert {(e.outcome, e.retried_as) for e in entries if e.outcome != "retried"} == {
        ("already-retried", created)
    }


def test_refusals_of_a_task_that_exists_are_recorded(book: RedisBook) -> None:
    ended_task(book, "live", state="queued", message=kept_message())
    ended_task(book, "bare")  # failed, its message not kept
    claims = claim_resends(book.engine, ["live", "bare", "nobody"], actor="ops", reason="why")
    assert [claim.code for claim in claims] == ["not-retryable", "no-message", "not-found"]
    assert [(e.outcome, e.reason, e.retried_as) for e in book.audit("live")] == [
        ("not-retryable", "why", None)
    ]
    assert [e.outcome for e in book.audit("bare")] == ["no-message"]
    assert book.audit("nobody") == []
    assert len(book.audit()) == 2


def test_a_retry_that_names_nobody_writes_no_entry(book: RedisBook) -> None:
    ended_task(book, "t", message=kept_message())
    ended_task(book, "q", state="queued", message=kept_message())
    claims = claim_resends(book.engine, ["t", "q"], reason="library call")
    assert claims[0].new_id is not None
    assert book.audit() == []
    info = book.info(claims[0].new_id)
    assert info is not None
    assert (info.retried_by, info.retry_reason) == (None, "library call")


def test_a_bad_actor_is_refused_before_anything_is_written(book: RedisBook) -> None:
    ended_task(book, "t", message=kept_message())
    for actor in ("", "x" * 201, "a\nb"):
        with pytest.raises(Exception, match="actor") as raised:
            claim_resends(book.engine, ["t"], actor=actor)
        assert getattr(raised.value, "field", None) == "actor"
    assert book.audit() == []
    info = book.info("t")
    assert info is not None
    assert info.retried_as is None
