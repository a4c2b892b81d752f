"""``AsyncBookBackend``: asyncbook as Celery's result backend, one record per task.

``result_backend = "asyncbook+redis://host:6379/0"`` (or ``asyncbook+rediss://``) picks
this class through the ``celery.result_backends`` entry point (``result_backend``, which
builds the class for the URL's scheme); it is Celery's ``RedisBackend`` with one change.
When an execution of a tracked task ends (SUCCESS, FAILURE, RETRY), its events (the
buffered start and progress, then the end) and Celery's result meta (same key, same
encoding, same expiry, same PUBLISH) go to Redis in one script call
(``lua/execution.lua``): one round trip, atomic. Celery's SUCCESS guard (a stored SUCCESS
is never overwritten) runs inside the script, after the book's events. For an
early-acked execution outside a chord the call is sent and not waited for: its answer
is read later and handled as here (``_late``).

The book and Celery never disagree. When the book refuses the end (past the deadline, or
cancelled meanwhile), Celery's meta reads what the book says:

- ``expired``: FAILURE with ``asyncbook.celery.TaskExpired`` (also for a message that
  expired unrun: Celery would store REVOKED);
- ``cancelled``: REVOKED with Celery's ``TaskRevokedError`` (the cancel's reason);
- ``failed`` before the task returned (stalled, say): FAILURE with
  ``asyncbook.celery.TaskEndedInBook``.

A tracked task revoked before it ran is cancelled in the book in the same write as its
REVOKED meta. Everything else (untracked tasks, STARTED, custom states, groups, chords)
is Celery's ``RedisBackend`` unchanged. ``install(app)`` stays needed: it creates tasks
at publish and buffers their starts; unset, ``asyncbook_redis_url`` is the backend's
Redis. The meta's expiry is at least the book's retention, so ``resultRef`` never names
a key that is gone. ``asyncbook+sentinel://`` gives ``AsyncBookSentinelBackend``.

Celery resolves a result backend URL by the name before its ``+`` (``by_url``): both
``asyncbook+redis://`` and ``asyncbook+sentinel://`` name ``asyncbook``, so the entry point
is the function ``result_backend``, which maps the rest of the URL's scheme to a class as
Celery's own aliases map ``redis`` and ``sentinel``. No ``__new__`` picks a class.
"""

from __future__ import annotations

import functools
import logging
import threading
from importlib import resources
from typing import Any

from celery import states
from celery.backends.redis import SentinelBackend
from celery.exceptions import ImproperlyConfigured, TaskRevokedError
from kombu.utils.encoding import bytes_to_str

from .._book import (
    ApplyItem,
    AsyncBook,
    EventInput,
    EventsScript,
    ScriptedAnswer,
    ScriptedWrite,
)
from .._limits import TASK_ID_LIMIT
from .._models import (
    AsyncState,
    AsyncTransition,
    CallbackResult,
    CancelEvent,
    FailEvent,
)
from ..errors import AsyncBookError, UnknownTaskError
from ._artifacts import Artifacts, discard_refused, offload_success, restored
from ._celery_seam import MetaCapture
from ._end_write import Write, end_event, error_of, log_refusal, meta_expires, until_replicated
from ._execution_args import ExecutionArgs
from ._integration import Integration
from ._late import LateWrites
from ._recorder import Taken
from ._registry import installed
from ._retrying import OUTAGE
from ._settings import Settings
from ._tracking import callback_id, is_tracked, now_ms

__all__ = [
    "AsyncBookBackend",
    "AsyncBookSentinelBackend",
    "TaskEndedInBook",
    "TaskExpired",
    "result_backend",
]

logger = logging.getLogger("asyncbook.celery")


@functools.cache
def _execution_source() -> str:
    """lua/execution.lua, read on first use (importing the module reads no file)."""
    return (resources.files("asyncbook.celery") / "lua" / "execution.lua").read_text(
        encoding="utf-8"
    )


# Celery state -> (the signal whose callback id the end carries, book states whose meta
# the backend writes instead of Celery's).
_ENDS = {
    states.SUCCESS: ("success", "|expired|cancelled|failed|"),
    states.FAILURE: ("failure", "|expired|cancelled|"),
    states.RETRY: ("retry", "|expired|cancelled|failed|"),
    # Revoked unrun (or terminated): cancelled in the book, or expired if the message was.
    # Its meta is always the book's verdict: the cancel's reason, whoever cancelled first.
    states.REVOKED: ("revoked", "|expired|failed|cancelled|"),
}


class TaskExpired(Exception):  # noqa: N818 (named as Celery names its outcomes)
    """A tracked task ended after its deadline: the book recorded it ``expired``, and
    asyncbook's result backend stores FAILURE with this exception."""

    __module__ = "asyncbook.celery"


class TaskEndedInBook(Exception):  # noqa: N818
    """The book had ended the task ``failed`` (stalled, for instance) before it returned:
    asyncbook's result backend stores FAILURE with this exception."""

    __module__ = "asyncbook.celery"


class AsyncBookBackend(MetaCapture):
    """Celery's Redis result backend whose writes for tracked tasks also write the book.

    The meta it writes beside the book is the one Celery's ``store_result`` makes
    (``MetaCapture.capture``, the one seam into Celery: ``_celery_seam``).

    ``asyncbook+sentinel://...`` makes an ``AsyncBookSentinelBackend`` instead
    (``result_backend``); this class refuses a ``sentinel://`` URL.
    """

    takes_buffered_events = True
    """An execution's buffered start and progress ride with its result (``Recorder.take``)."""
    defers_writes = True
    """An early-acked execution's write is not waited for (``_late``); False on a
    subclass waits for every write."""
    stores_book_verdicts = True
    """A REVOKED it stores carries the book's cancel reason: a worker stores REVOKED
    through it for a task it holds once the book cancels it (``Controls``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        url = kwargs.get("url")
        if _is_sentinel(url) and not isinstance(self, SentinelBackend):
            raise ImproperlyConfigured(
                f"{type(self).__name__} does not speak Sentinel: "
                "AsyncBookSentinelBackend does (asyncbook+sentinel://...)"
            )
        super().__init__(*args, **kwargs)
        # result_compression is new in Celery 5.7; before it, results are never compressed.
        self._json_meta = self.serializer == "json" and not getattr(self, "compression", None)
        self._books: dict[int, tuple[AsyncBook, EventsScript | None]] = {}
        self._verdicts: dict[str, tuple[str, BaseException]] = {}
        self._lock = threading.Lock()
        self._warned: set[str] = set()
        self._late: LateWrites | None = None
        """This backend's writes sent and not yet answered (made on the first)."""

    @functools.cached_property
    def artifacts(self) -> Artifacts | None:
        """The store results are kept in by reference (None: none is configured)."""
        return Artifacts.of(Settings.from_conf(self.app.conf), installed(self.app))

    def meta_from_decoded(self, meta: Any) -> Any:
        """Celery's, with a result stored by reference fetched and checked (``_artifacts``)."""
        return restored(super().meta_from_decoded(meta), lambda: self.artifacts, self.accept)

    # -- reading -------------------------------------------------------------------------

    def get(self, key: Any) -> Any:
        """Celery's ``get``, after this backend's writes not yet answered (``_late``):
        a read here sees what it wrote (``AsyncResult`` in the worker process, a
        ``task_success`` handler). Not while a meta is captured without reading it."""
        late = self._late
        if late is not None and (self._taking.suffix is None or self._taking.read_stored):
            late.settle(block=True)
        return super().get(key)

    def mget(self, keys: Any) -> Any:
        """Celery's ``mget``, after this backend's writes not yet answered."""
        if self._late is not None:
            self._late.settle(block=True)
        return super().mget(keys)

    # -- writing -------------------------------------------------------------------------

    def store_result(
        self,
        task_id: Any,
        result: Any,
        state: str,
        traceback: Any = None,
        request: Any = None,
        **kwargs: Any,
    ) -> Any:
        """Celery's ``store_result``; the end of a tracked execution also writes the book."""
        end = _ENDS.get(state)
        name = getattr(request, "task", None) if end is not None else None
        task = self.app.tasks.get(name) if isinstance(name, str) else None
        result = offload_success(self.artifacts, state, task_id, result, task, self.serializer)
        if state == states.REVOKED and request is None and task_id:
            # A revoke broadcast marks a task the worker does not hold (Celery 5.7): the
            # meta carries the reason the book holds, when the book cancelled it.
            result = self._book_revoked(bytes_to_str(task_id)) or result
        if end is None or task is None or not is_tracked(task) or not task_id:
            return super().store_result(task_id, result, state, traceback, request, **kwargs)
        if len(bytes_to_str(task_id)) > TASK_ID_LIMIT:  # published untracked, said there
            return super().store_result(task_id, result, state, traceback, request, **kwargs)
        integration = installed(self.app)
        if integration is None:
            self._warn_once(
                "install",
                "asyncbook: tracked task %s ended but asyncbook.celery.install(app) was not "
                "called: only Celery's result is stored",
                name,
            )
            return super().store_result(task_id, result, state, traceback, request, **kwargs)
        task_id = bytes_to_str(task_id)
        signal, refused = end
        retries = int(getattr(request, "retries", 0) or 0)
        event: EventInput | None
        if state == states.REVOKED and str(result) == "expired":
            # The message expired unrun: the book expires the task at its deadline, and
            # the meta says what the book says (FAILURE, TaskExpired).
            event, refused = None, "|cancelled|failed|"
            state, result = states.FAILURE, _expired(task_id)
        elif state == states.REVOKED:
            reason = "terminated" if str(result) == "terminated" else "revoked"
            event = CancelEvent(at_ms=now_ms(), reason=reason)
        else:
            event = end_event(integration, task, task_id, result, state)
            if isinstance(event, FailEvent) and state == states.FAILURE:
                event = integration.info_policy.failure_event(event, result, traceback)
        item: Any = (
            task_id,
            event,
            None if event is None else callback_id(task_id, signal, retries),
        )
        fused = self._fused(integration)
        if fused is None:
            book_state, answer = self._write_apart(integration, item)
            if f"|{book_state}|" in refused:
                discard_refused(self.artifacts, result)
                self._write_verdict(None, task_id, book_state, request, answer)
                encoded = self.encode_result(result, state)
            else:
                encoded = super().store_result(task_id, result, state, traceback, request, **kwargs)
        else:
            encoded = self._write_together(
                integration, fused, item, result, state, traceback, request, refused
            )
        integration.backend_wrote(task_id, signal, retries)
        return encoded

    def _book_revoked(self, task_id: str) -> TaskRevokedError | None:
        """``TaskRevokedError`` with the reason of the book's cancel of ``task_id``; None
        when the book does not hold it cancelled (or cannot be read)."""
        integration = installed(self.app)
        if integration is None:
            return None
        try:
            task = integration.book.get(task_id)
        except AsyncBookError as error:
            logger.warning("asyncbook: could not read task %s: %s", task_id, error)
            return None
        if task is None or task.state is not AsyncState.CANCELLED:
            return None
        return TaskRevokedError(task.error or "cancelled")

    @staticmethod
    def _write_apart(integration: Integration, item: Any) -> tuple[str, Any]:
        """The book's write when it is not on this backend's Redis (or is sharded): the
        book's state after it ('' when it did not answer), and its answer."""
        task_id, event, _callback = item
        answer: Any = (
            integration.expire(task_id) if event is None else integration.recorder.write(item)[0]
        )
        if isinstance(answer, CallbackResult | AsyncTransition):
            return answer.task.state.value, answer
        return "", answer

    def _fused(self, integration: Integration) -> EventsScript | None:
        """The meta script beside the book's events, when the book lives on this
        backend's Redis (``AsyncBook.script_beside``)."""
        book = integration.book
        with self._lock:
            known = self._books.get(id(book))
            if known is not None and known[0] is book:
                return known[1]
            fused = book.script_beside(self.client, _execution_source())
            if fused is None and getattr(book, "sharded", False):
                logger.info(
                    "asyncbook: the book is sharded (asyncbook_shards): the book and "
                    "Celery's result are written one after the other, not in one round trip"
                )
            elif fused is None:
                logger.warning(
                    "asyncbook: the book is not on the result backend's Redis (set "
                    "asyncbook_redis_url to it, or leave it unset): the book and Celery's "
                    "result are written one after the other, not in one round trip"
                )
            self._books[id(book)] = (book, fused)
            return fused

    def _write_together(
        self,
        integration: Integration,
        fused: EventsScript,
        item: ApplyItem,
        result: Any,
        state: str,
        traceback: Any,
        request: Any,
        refused: str,
    ) -> Any:
        """The buffered events, the end and the meta: one script call. Celery's guard (a
        stored SUCCESS is kept) runs in the script for a JSON meta; for a meta the script
        cannot read (pickle, msgpack, compressed), Celery's own guard reads it first.
        Returns the result as Celery encoded it.

        The call of an early-acked task outside a chord is not waited for (``_late``):
        its answer is read later and handled as here (``_answered``)."""
        task_id = item[0]
        meta = self.capture(
            task_id, result, state, traceback, request, read_stored=not self._json_meta
        )
        guard = "json" if self._json_meta else "keep" if meta.value is None else "none"
        args = ExecutionArgs(
            meta.value or "", meta_expires(self.expires, meta, fused), guard, refused
        ).argv()
        recorder = integration.recorder
        taken = recorder.take(task_id)
        events = [(entry.item[1], entry.item[2]) for entry in taken] + [(item[1], item[2])]
        name, group = getattr(request, "task", None), getattr(request, "group", None)
        write = ScriptedWrite(task_id, events, bytes_to_str(meta.key), args, name, group)
        # Kept with the write: the execution may be over when its answer is read.
        create = integration.running.creator_of(task_id)
        sent = Write(integration, fused, item, write, taken, meta, create, request)
        sent.result, sent.state, sent.traceback = result, state, traceback
        defers, late = self._defers(integration, request), self._late
        if late is None and defers:
            with self._lock:
                late = self._late = self._late or LateWrites(self._answered)
            integration.book.wait_for_writes(late)  # the worker's book reads its own writes
        if late is not None:
            if not defers:
                late.settle()  # answers already here first, in order
            elif late.send(fused, write, sent):
                return meta.encoded
        return self._answered(sent, None)

    def _defers(self, integration: Integration, request: Any) -> bool:
        """Whether an execution's write need not be waited for: its message was acked
        before it ran (not ``acks_late``: its ack must follow the write), it is no chord
        member (``on_chord_part_return`` needs the book's verdict at once), and the book
        waits for no replicas (``EventsScript.sender``)."""
        task = self.app.tasks.get(getattr(request, "task", None))
        return (
            self.defers_writes
            and task is not None
            and not task.acks_late
            and not getattr(request, "chord", None)
        )

    def _answered(self, sent: Write, answer: Any) -> Any:
        """Handle ``sent``'s answer: written now and waited for (``answer`` None, or one a
        lost connection took: sent again), or read later. Returns the encoded result."""
        integration, fused, item, write = sent.integration, sent.fused, sent.item, sent.write
        task_id, taken, recorder = item[0], sent.taken, integration.recorder
        late = answer is not None

        def write_once() -> ScriptedAnswer:
            return self.ensure(lambda: fused.apply(write), ())  # type: ignore[no-any-return]

        def write_now() -> ScriptedAnswer:
            return until_replicated(write_once, integration.settings.retry_for)

        def create() -> bool:
            if sent.create is not None:
                return sent.create()
            return integration.create_missing(task_id)

        try:
            try:
                if answer is None or isinstance(answer, OUTAGE):
                    answer = write_now()
                elif isinstance(answer, BaseException):
                    raise answer
            except UnknownTaskError:
                # The publisher's create has not landed (or was lost): create it from
                # this execution's message, then write again.
                if not create():
                    raise
                answer = write_now()
        except UnknownTaskError as error:
            logger.error("asyncbook: task %s is not in the book: %s", task_id, error)
            recorder.answer(taken, [error] * len(taken))
            return super().store_result(
                task_id, sent.result, sent.state, sent.traceback, sent.request
            )
        except BaseException:
            if not late:
                recorder.answer(taken, [None] * len(taken))  # the writer sends them later
                raise
            # Read late: the end goes to the writer with the events (held and sent again
            # until the book answers); Celery's meta is not written.
            logger.exception("asyncbook: task %s: its result could not be written", task_id)
            end = Taken(item, None, create=sent.create)
            recorder.answer([*taken, end], [None] * (len(taken) + 1))
            return sent.meta.encoded
        recorder.answer(taken, answer.outcomes[:-1])
        log_refusal(item, answer.outcomes[-1])
        if answer.status == "refused":
            discard_refused(self.artifacts, sent.result)
            self._write_verdict(fused, task_id, answer.state, sent.request, answer.outcomes[-1])
        return sent.meta.encoded

    def flush_writes(self) -> None:
        """Read and handle the answers of this process's writes not yet read."""
        if self._late is not None:
            self._late.settle(block=True)

    def _write_verdict(
        self,
        fused: EventsScript | None,
        task_id: str,
        book_state: str,
        request: Any,
        answer: Any = None,
    ) -> None:
        """The meta that says what the book says (it refused the end)."""
        error: BaseException
        state: str
        if book_state == "expired":
            state = states.FAILURE
            error = _expired(task_id)
        elif book_state == "cancelled":
            state = states.REVOKED
            error = TaskRevokedError(error_of(answer) or "cancelled")
        else:
            state = states.FAILURE
            why = error_of(answer)
            error = TaskEndedInBook(
                f"task {task_id} had already ended {book_state}" + (f": {why}" if why else "")
            )
        if request is not None and getattr(request, "chord", None):
            with self._lock:
                self._verdicts[task_id] = (state, error)
        if fused is None:
            super().store_result(task_id, error, state, None, request)
            return
        # No guard: the book refused this end, so no SUCCESS it accepted can be stored.
        meta = self.capture(task_id, error, state, None, request, read_stored=False)
        meta_key = bytes_to_str(meta.key)
        args = ExecutionArgs(
            meta.value or "", meta_expires(self.expires, meta, fused), "none", ""
        ).argv()
        self.ensure(lambda: fused.apply(ScriptedWrite(task_id, [], meta_key, args)), ())

    def on_chord_part_return(self, request: Any, state: str, result: Any, **kwargs: Any) -> Any:
        """Celery's chord counting; a member whose end the book refused counts as what the
        book says (so the chord's callback sees the same failure as ``AsyncResult``)."""
        task_id = getattr(request, "id", None)
        if task_id is not None and self._verdicts:
            with self._lock:
                verdict = self._verdicts.pop(str(task_id), None)
            if verdict is not None:
                state, result = verdict
        return super().on_chord_part_return(request, state, result, **kwargs)

    def _warn_once(self, key: str, message: str, *args: Any) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logger.warning(message, *args)


def _expired(task_id: str) -> TaskExpired:
    return TaskExpired(f"task {task_id} ended after its deadline: it expired")


_SentinelBackend: Any = SentinelBackend


class AsyncBookSentinelBackend(AsyncBookBackend, _SentinelBackend):  # type: ignore[misc]
    """asyncbook's backend behind Redis Sentinel, as Celery's ``SentinelBackend``:
    ``result_backend = "asyncbook+sentinel://host:26379/0;sentinel://host2:26379/0"``
    with ``result_backend_transport_options = {"master_name": "mymaster"}``."""


def _is_sentinel(url: object) -> bool:
    return isinstance(url, str) and url.startswith("sentinel")


def result_backend(app: Any = None, url: str | None = None, **kwargs: Any) -> AsyncBookBackend:
    """The ``celery.result_backends`` entry point ``asyncbook``: Celery calls it as it
    calls a backend class, ``(app=..., url=...)``, with the URL after ``asyncbook+``.
    ``sentinel://...`` builds an ``AsyncBookSentinelBackend``, any other URL an
    ``AsyncBookBackend``."""
    kind = AsyncBookSentinelBackend if _is_sentinel(url) else AsyncBookBackend
    return kind(app=app, url=url, **kwargs)
