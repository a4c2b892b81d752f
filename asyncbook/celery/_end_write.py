"""An execution's end as asyncbook's result backend writes it: its event
(``end_event``), its write kept while the answer is not read (``Write``: the execution
may be over by then), the resend while too few replicas acknowledge it, and how the
book's answer to it is logged."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from celery import states

from .._book import ApplyItem, EventsScript, ScriptedWrite
from .._limits import bounded_error
from .._models import AsyncTransition, CallbackResult, FailEvent, SucceedEvent
from ..errors import AsyncBookError, NotReplicatedError
from ..redis import EventOutcome
from ._artifacts import artifact_of
from ._celery_seam import MetaWrite
from ._integration import Integration
from ._recorder import Taken
from ._tracking import describe_error, now_ms, result_hash

__all__ = ["Write", "end_event", "error_of", "log_refusal", "meta_expires", "until_replicated"]

logger = logging.getLogger("asyncbook.celery")

_T = TypeVar("_T")


@dataclass(eq=False, slots=True)
class Write:
    """An execution's write (``_write_together``) and what handling its answer needs,
    kept while the answer is not read (the execution may be over by then)."""

    integration: Integration
    fused: EventsScript
    item: ApplyItem
    write: ScriptedWrite
    taken: Sequence[Taken]
    meta: MetaWrite
    create: Callable[[], bool] | None
    """Creates the task from its message (``Running.creator_of``, taken at the write)."""
    request: Any
    result: Any = None
    state: str = ""
    traceback: Any = None


def meta_expires(default: Any, meta: MetaWrite, book: EventsScript) -> int:
    """A Celery meta's expiry in seconds (0: none): Celery's (the meta's own, else the
    backend's ``default``), except that the meta outlives the book's record of the task
    (its ``resultRef`` never names a key that is gone): at least the book's retention,
    and none when the book keeps records forever."""
    expires = int((default if meta.expires is None else meta.expires) or 0)
    if book.retention is None:
        return 0
    if expires > 0:
        expires = max(expires, math.ceil(book.retention.total_seconds()))
    return expires


def until_replicated(call: Callable[[], _T], retry_for: float) -> _T:
    """``call()``, sent again with backoff while it reaches too few replicas
    (``asyncbook_wait_replicas``: it ran on the primary, and callback ids make the resend
    safe), for at most ``retry_for`` seconds; then its ``NotReplicatedError``."""
    deadline = time.monotonic() + retry_for
    delay = 0.05
    while True:
        try:
            return call()
        except NotReplicatedError as error:
            if time.monotonic() + delay > deadline:
                raise
            logger.warning("asyncbook: %s; sending it again in %.2f s", error, delay)
            time.sleep(delay)
            delay = min(delay * 2, 1.0)


def end_event(
    integration: Integration, task: Any, task_id: str, result: Any, state: str
) -> SucceedEvent | FailEvent:
    at = now_ms()
    if state == states.SUCCESS and (stored := artifact_of(result)) is not None:
        # Stored by reference (``_artifacts``): the store's URL and the hash of its bytes.
        return SucceedEvent(at_ms=at, result_ref=stored["ref"], result_hash=stored["hash"])
    if state == states.SUCCESS:
        ref = integration.result_ref(task, task_id, result)
        digest = result_hash(result)
        if type(ref) is not str:  # the user's hook: validated (and refused) as before
            return SucceedEvent(at_ms=at, result_ref=ref, result_hash=digest)
        return SucceedEvent.model_construct(at_ms=at, result_ref=ref, result_hash=digest)
    error = result if isinstance(result, BaseException) else None
    text = describe_error(error) if error is not None else bounded_error(str(result or "error"))
    return FailEvent(at_ms=at, error=text, retryable=state == states.RETRY)


def error_of(answer: Any) -> str | None:
    if isinstance(answer, CallbackResult | AsyncTransition):
        return answer.task.error
    return answer.error if isinstance(answer, EventOutcome) else None


def log_refusal(item: ApplyItem, answer: Any) -> None:
    if isinstance(answer, AsyncBookError):
        logger.error("asyncbook: task %s refused an event: %s", item[0], answer)
    elif isinstance(answer, EventOutcome) and not answer.changed and not answer.duplicate_callback:
        if answer.reason == "duplicate-cancel":
            # A revoke of a task cancelled before (by the revoke's own broadcast, or a
            # cancel): nothing was refused that anyone asked for.
            logger.debug("asyncbook: task %s was cancelled already", item[0])
            return
        logger.warning(
            "asyncbook: task %s refused its %s (%s, state %s)",
            item[0],
            getattr(item[1], "type", "event"),
            answer.reason,
            answer.state,
        )
