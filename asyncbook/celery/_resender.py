"""``Resender``: a task's kept message sent again, as a new task (an operator's resend;
not Celery's ``Task.retry``).

The book decides first (``claim_book_resends``, in ``asyncbook.redis``: one new task per
task, ever, linked both ways); then each new task's message is published through kombu
to the broker, under the new id, with the headers Celery gives a fresh task (its own
root, no parent, no retries, no eta, and ``expires`` at the new deadline). A message the
broker did not take leaves no task queued for ever: its new task is cancelled at once,
with the reason, by the resend's actor (``RESENDER_ACTOR`` when none was given) on the
audit trail. The web layer, which imports no Celery, is handed one by its builder
(``asyncbook serve``, the demo) as its ``Resending``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

from .._kept import KeptMessage
from ..redis import RedisBook, ResendClaim, ResendResult, claim_book_resends

__all__ = ["RESENDER_ACTOR", "Resender", "Retrier", "fresh_headers"]

log = logging.getLogger("asyncbook.celery")

RESENDER_ACTOR = "asyncbook:resender"
"""Who cancels a resend that was not sent, on the audit trail, when the resend named
nobody (``asyncbook:retrier`` in older versions)."""
_REASON_LIMIT = 500
"""Longest reason a resend that was not sent cancels its new task with, in characters."""
_CONNECT_TIMEOUT = 5.0
"""Seconds a resend waits for the broker to answer."""


def fresh_headers(message: KeptMessage, new_id: str, deadline_ms: int | float) -> dict[str, Any]:
    """The kept headers as Celery writes them for a fresh task ``new_id``."""
    headers = dict(message.headers)
    headers.update(
        id=new_id,
        root_id=new_id,
        parent_id=None,
        retries=0,
        eta=None,
        expires=datetime.fromtimestamp(deadline_ms / 1000, tz=UTC).isoformat(),
        group=None,
        group_index=None,
    )
    return headers


class Resender:
    """Resends tasks of ``book`` through the broker at ``broker_url`` (kombu)."""

    def __init__(self, book: RedisBook, broker_url: str) -> None:
        self.book = book
        self.broker_url = broker_url

    def resend(
        self, task_ids: Sequence[str], *, actor: str | None = None, reason: str | None = None
    ) -> list[ResendResult]:
        """Resend each task (``actor``: who asks, ``reason``: why; both kept with the new
        task, and given an actor, on the original's audit trail); each answer says what
        became of one task, in order."""
        claims = claim_book_resends(self.book, task_ids, actor=actor, reason=reason)
        sends = [send for send in map(_Send.of, claims) if send is not None]
        failures = dict(zip((s.task_id for s in sends), self._publish(sends), strict=True))
        results = []
        for claim in claims:
            if claim.new_id is None:
                code = claim.code or "refused"
                retried_as = claim.detail if code == "already-retried" else None
                results.append(ResendResult(claim.task_id, retried_as, code, claim.text))
                continue
            failure = failures.get(claim.task_id)
            if failure is None:
                results.append(ResendResult(claim.task_id, claim.new_id))
                continue
            why = f"resend not sent: the broker did not take the message ({failure})"
            why = why if len(why) <= _REASON_LIMIT else why[: _REASON_LIMIT - 1] + "…"
            self.book.cancel(claim.new_id, why, actor=actor or RESENDER_ACTOR)
            results.append(ResendResult(claim.task_id, claim.new_id, "not-sent", why))
        return results

    def retry(
        self, task_ids: Sequence[str], *, actor: str | None = None, reason: str | None = None
    ) -> list[ResendResult]:
        """``resend``'s old name (``asyncbook.redis.Retrier.retry``); goes in 0.3.0."""
        return self.resend(task_ids, actor=actor, reason=reason)

    def _publish(self, sends: Sequence[_Send]) -> list[str | None]:
        """Publish each message on one connection; per message None or why not (once the
        broker fails, the messages left are not sent)."""
        if not sends:
            return []
        import kombu  # the celery extra's: needed only once a resend is sent
        import kombu.exceptions

        connection = kombu.Connection(self.broker_url, connect_timeout=_CONNECT_TIMEOUT)
        errors: tuple[type[BaseException], ...] = (
            kombu.exceptions.KombuError,
            OSError,
            *connection.connection_errors,
            *connection.channel_errors,
        )
        answers: list[str | None] = []
        try:
            with connection:
                connection.ensure_connection(max_retries=1)
                producer = connection.Producer()
                for send in sends:
                    send.publish(producer)
                    answers.append(None)
        except errors as error:
            log.warning("asyncbook: %d resends not sent: %r", len(sends) - len(answers), error)
            answers += [f"{type(error).__name__}: {error}"] * (len(sends) - len(answers))
        return answers


Retrier = Resender
"""``Resender``'s old name (it was ``asyncbook.redis.Retrier``); goes in 0.3.0."""


class _Send(NamedTuple):
    """A resend the book created: its message to publish under the new id."""

    task_id: str
    new_id: str
    message: KeptMessage
    deadline_ms: int | float

    @classmethod
    def of(cls, claim: ResendClaim) -> _Send | None:
        """The send of a created claim; None for a refused one."""
        if claim.new_id is None or claim.message is None or claim.deadline_ms is None:
            return None
        return cls(claim.task_id, claim.new_id, claim.message, claim.deadline_ms)

    def publish(self, producer: Any) -> None:
        """Publish the kept message under the new id: the body as kept, untouched."""
        message = self.message
        producer.publish(
            message.body,
            exchange=message.exchange,
            routing_key=message.routing_key,
            headers=fresh_headers(message, self.new_id, self.deadline_ms),
            content_type=message.content_type,
            content_encoding=message.content_encoding,
            correlation_id=self.new_id,
            retry=False,
            **message.properties,
        )
