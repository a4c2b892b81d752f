"""``CreateSender``: creates sent without waiting for their answers.

A publisher's create need not hold up ``apply_async``: each is written to a connection
of the sender's own at once (Redis runs it a network hop later) and its answer is read
later, in order, a batch at a time (``collect``). Nothing waits for a round trip, and no
thread is involved.

It runs the book's one create plan (``_operations.create``, the plan ``create`` waits
on), and sends its script call by the drivers' own steps (``_driver.unwaited``): the
first step is written now, the reply read later is handed to the suspended steps (after
NOSCRIPT they answer with EVAL, written then), and their answer to the suspended plan,
which reads it as ``create`` does. The steps are plain commands, so a raw connection
writes them (``send_command``) and reads their replies (``read_response``) in order.

When the book waits for replicas (``wait_replicas``), a ``WAIT`` (``_driver.replica_wait``)
follows the creates on the same connection (one behind every ``_READ_AFTER`` creates, and
one behind the last before ``collect`` reads): a create is acknowledged when the answer
of the ``WAIT`` behind it is read. One that counted too few replicas leaves its creates
unacknowledged: they are handed back by ``take_unanswered`` with those an outage left
unanswered, to be sent again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

from redis.exceptions import ClusterDownError, MovedError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .._book import CreateSpec
from ..errors import AsyncBookError, NotReplicatedError
from ._connection import RedisUnavailableError, rediscover
from ._driver import Call, Step, Steps, replica_wait, unwaited
from ._engine import Engine
from ._operations import create
from ._plan import Command, Plan, ScriptCall

__all__ = ["CreateSender"]

log = logging.getLogger(__name__)

_READ_AFTER = 64
"""Answers left unread before ``send`` reads those that have arrived."""
_OUTAGE = (RedisConnectionError, RedisTimeoutError, OSError)


@dataclass(eq=False)
class _Sent:
    """A request written and not answered: a create (its spec, its plan suspended at its
    script call) or, with no spec, a ``WAIT``; ``steps`` are suspended at the step
    written."""

    spec: CreateSpec | None
    plan: Plan[Any] | None
    steps: Steps[Any]


class CreateSender:
    """``create`` calls written to Redis at once, their answers read later.

    ``send`` raises ``RedisUnavailableError`` when it could not write (then the creates
    written and not yet answered are handed back by ``take_unanswered``: each may or may
    not have run, and a create with ``exist_ok`` can be sent again safely). With
    ``wait_replicas``, so are the creates a ``WAIT`` found on too few replicas (each
    ran on the primary; a failover may lose it).
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._connection: Any = None
        self._unanswered: deque[_Sent] = deque()
        """What was written and not answered: creates, and ``WAIT``s."""
        self._unconfirmed: list[CreateSpec] = []
        """Creates answered, the ``WAIT`` behind them not yet (``wait_replicas``)."""
        self._uncovered = 0
        """Creates written since the last ``WAIT``."""
        self._lost: list[CreateSpec] = []
        self._moved = False
        """A Cluster node answered MOVED: the next connection goes to the slot's node."""

    def send(self, spec: CreateSpec) -> None:
        """Write one create; a spec Python refuses raises its ``AsyncBookError``."""
        plan = create(self.engine.layout, spec)
        try:
            call = self._script_call(plan)  # before the book's first write: its check
        except _OUTAGE as error:
            raise RedisUnavailableError(f"the book's Redis did not answer: {error}") from error
        steps = unwaited(self.engine, call)
        with self._lock:
            try:
                self._connect()
                self._write(next(steps))
            except _OUTAGE as error:
                self._drop_connection()
                raise RedisUnavailableError(f"the book's Redis did not answer: {error}") from error
            self._unanswered.append(_Sent(spec, plan, steps))
            if self.engine.wait.replicas:
                self._uncovered += 1
                if self._uncovered >= _READ_AFTER:
                    try:
                        self._send_wait()
                    except _OUTAGE as error:
                        self._outage(error)
                        return
            if len(self._unanswered) >= _READ_AFTER:
                self._read(block=False)

    def pending(self) -> bool:
        """True while creates were written and their answers (or, with
        ``wait_replicas``, their ``WAIT``'s) not read."""
        return bool(self._unanswered) or bool(self._unconfirmed)

    def collect(self) -> None:
        """Read every answer still due (waits for them); errors are logged."""
        with self._lock:
            self._read(block=True)

    def close(self) -> None:
        """Read what is due, then close the connection (the next ``send`` opens one)."""
        with self._lock:
            if self._connection is not None:
                self._read(block=True)
                self._drop_connection()

    def take_unanswered(self) -> list[CreateSpec]:
        """The creates whose answers were lost with the connection (to send again)."""
        with self._lock:
            lost, self._lost = self._lost, []
        return lost

    def _script_call(self, plan: Plan[Any]) -> ScriptCall:
        """Run ``plan`` up to its script call (a spec Python refuses raises here); what it
        asks before (the server check of the book's first write) is waited on."""
        request = next(plan)
        while not isinstance(request, ScriptCall):
            try:
                reply, error = self.engine.execute(request), None
            except Exception as met:  # thrown into the plan, as a driver does
                reply, error = None, met
            request = plan.send(reply) if error is None else plan.throw(error)
        return request

    def _connect(self) -> Any:
        if os.getpid() != self._pid:  # a forked child: the parent's socket is not ours
            self._pid, self._connection = os.getpid(), None
            self._unanswered.clear()
            self._unconfirmed.clear()
            self._uncovered = 0
        if self._moved and not self._unanswered and not self._unconfirmed:
            self._moved = False
            self._drop_connection()
        if self._connection is None:
            pool = self.engine.slot_client().connection_pool
            connection = pool.make_connection()
            # A fresh server, or one restarted since the last connection, may lack
            # create.lua: its EVALSHA would be sent again by EVAL only when its answer
            # is read (creates later): load it first, one round trip.
            script = self.engine.scripts.create
            try:
                connection.send_command("SCRIPT", "LOAD", script.source, check_health=False)
                connection.read_response()
            except ResponseError:
                pass  # refused (a restricted user): NOSCRIPT answers are still sent again
            except BaseException:
                with contextlib.suppress(*_OUTAGE):
                    connection.disconnect()
                raise
            self._connection = connection
        return self._connection

    def _write(self, step: Step) -> None:
        """One step of the driver's, written on the connection (its reply read later)."""
        sent = step.command if isinstance(step, Call) else step
        assert isinstance(sent, Command), "a create's steps are single commands"
        self._connection.send_command(sent.name.upper(), *sent.args, check_health=False)

    def _drop_connection(self) -> None:
        if self._connection is not None:
            with contextlib.suppress(*_OUTAGE):
                self._connection.disconnect()
        self._connection = None
        self._lost.extend(self._unconfirmed)
        self._lost.extend(sent.spec for sent in self._unanswered if sent.spec is not None)
        self._unanswered.clear()
        self._unconfirmed.clear()
        self._uncovered = 0

    def _outage(self, error: BaseException) -> None:
        log.warning("asyncbook: %d create(s) unanswered: %r", len(self._unanswered), error)
        self._drop_connection()

    def _send_wait(self) -> None:
        """Write ``WAIT`` behind the creates written so far (``wait_replicas``)."""
        steps = replica_wait(self.engine)
        self._write(next(steps))
        self._unanswered.append(_Sent(None, None, steps))
        self._uncovered = 0

    def _confirm(self, steps: Steps[Any], acknowledged: Any, error: Exception | None) -> None:
        """A ``WAIT``'s reply: the creates answered before it are acknowledged, or, on
        too few replicas, handed back to be sent again."""
        try:
            _resume(steps, acknowledged, error)
        except (NotReplicatedError, ResponseError, RedisUnavailableError) as refused:
            log.warning(
                "asyncbook: %d create(s) not acknowledged, to be sent again: %s",
                len(self._unconfirmed),
                refused,
            )
            self._lost.extend(self._unconfirmed)
            if isinstance(refused, RedisUnavailableError) and not self._moved:
                self._moved = True  # a replica now: the next connection goes elsewhere
                rediscover(self.engine)
        self._unconfirmed.clear()

    def _answered(self, sent: _Sent, reply: Any, error: Exception | None) -> None:
        """A create's reply: handed to its steps (after NOSCRIPT they write EVAL, and the
        create waits again), then their answer to its plan, which reads it as ``create``
        does; a refusal is logged, a create a moved slot did not run is sent again."""
        assert sent.spec is not None
        assert sent.plan is not None
        spec = sent.spec
        answer: Any = None
        thrown: Exception | None = None
        try:
            done, step = _resume(sent.steps, reply, error)
        except Exception as met:  # the call's error, thrown into the plan
            thrown = met
        else:
            if not done:  # NOSCRIPT: the create did not run; EVAL runs and caches it
                self._write(step)
                self._unanswered.append(sent)
                if self.engine.wait.replicas:
                    self._send_wait()
                return
            answer = step
        try:
            done, _task = _resume(sent.plan, answer, thrown)
            assert done, "the create plan ends at its script call's answer"
        except (MovedError, ClusterDownError) as moved:
            # Not run: the slot moved (a Cluster failover). Sent again, elsewhere.
            log.warning("asyncbook: task %s to be created again: %s", spec.id, moved)
            self._lost.append(spec)
            if not self._moved:
                self._moved = True
                rediscover(self.engine)
        except (ResponseError, AsyncBookError) as refused:
            log.error("asyncbook: task %s could not be created: %s", spec.id, refused)
        else:
            if self.engine.wait.replicas:
                self._unconfirmed.append(spec)

    def _read(self, *, block: bool) -> None:
        """Read answers in order: all of them (``block``) or those already here."""
        if block and self._uncovered and self._connection is not None:
            try:
                self._send_wait()
            except _OUTAGE as error:
                self._outage(error)
                return
        while self._unanswered:
            connection = self._connection
            sent = self._unanswered[0]
            popped = False
            try:
                if not block and not connection.can_read(timeout=0):
                    return
                self._unanswered.popleft()
                popped = True
                reply: Any = None
                refused: Exception | None = None
                try:
                    reply = connection.read_response(disable_decoding=sent.spec is not None)
                except ResponseError as met:
                    refused = met
                if sent.spec is None:
                    self._confirm(sent.steps, reply, refused)
                else:
                    self._answered(sent, reply, refused)
            except _OUTAGE as error:
                if popped and sent.spec is not None and sent not in self._unanswered:
                    self._unanswered.appendleft(sent)  # its answer was lost too
                self._outage(error)
                return


def _resume(plan: Any, reply: Any, error: Exception | None) -> tuple[bool, Any]:
    """Hand suspended steps (or a plan) the reply, or throw them the error: (False, what
    they send next) or (True, their answer); an error they raise is raised."""
    try:
        return False, plan.send(reply) if error is None else plan.throw(error)
    except StopIteration as stop:
        return True, stop.value
