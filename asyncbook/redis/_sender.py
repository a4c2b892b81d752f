"""``CreateSender``: creates sent without waiting for their answers.

A publisher's create need not hold up ``apply_async``: each is written to a connection
of the sender's own at once (Redis runs it a network hop later) and its answer is read
later, in order, a batch at a time (``collect``). Nothing waits for a round trip, and no
thread is involved.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections import deque
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .._book import CreateSpec
from ..errors import AsyncBookError, task_exists
from ._connection import RedisUnavailableError
from ._engine import Engine
from ._replies import status_of
from ._scripts import ScriptStatus

__all__ = ["CreateSender"]

log = logging.getLogger(__name__)

_READ_AFTER = 64
"""Answers left unread before ``send`` reads those that have arrived."""
_OUTAGE = (RedisConnectionError, RedisTimeoutError, OSError)


class CreateSender:
    """``create`` calls written to Redis at once, their answers read later.

    ``send`` raises ``RedisUnavailableError`` when it could not write (then the creates
    written and not yet answered are handed back by ``take_unanswered``: each may or may
    not have run, and a create with ``exist_ok`` can be sent again safely).
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._connection: Any = None
        self._unanswered: deque[tuple[CreateSpec, list[str], list[str]]] = deque()
        self._lost: list[CreateSpec] = []

    def send(self, spec: CreateSpec) -> None:
        """Write one create; a spec Python refuses raises its ``AsyncBookError``."""
        _task, keys, args = self.engine.create_call(spec)
        script = self.engine.scripts.create
        with self._lock:
            try:
                connection = self._connect()
                connection.send_command(
                    "EVALSHA", script.sha, len(keys), *keys, *args, check_health=False
                )
            except _OUTAGE as error:
                self._drop_connection()
                raise RedisUnavailableError(f"the book's Redis did not answer: {error}") from error
            self._unanswered.append((spec, keys, args))
            if len(self._unanswered) >= _READ_AFTER:
                self._read(block=False)

    def pending(self) -> bool:
        """True while creates were written and their answers not read."""
        return bool(self._unanswered)

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

    def _connect(self) -> Any:
        if os.getpid() != self._pid:  # a forked child: the parent's socket is not ours
            self._pid, self._connection = os.getpid(), None
            self._unanswered.clear()
        if self._connection is None:
            pool = self.engine.slot_client().connection_pool
            connection = pool.make_connection()
            # A fresh server, or one restarted since the last connection, may lack
            # create.lua: its EVALSHA would answer NOSCRIPT, and run again by EVAL only
            # when that answer is read (creates later): load it first, one round trip.
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

    def _drop_connection(self) -> None:
        if self._connection is not None:
            with contextlib.suppress(*_OUTAGE):
                self._connection.disconnect()
        self._connection = None
        self._lost.extend(spec for spec, _keys, _args in self._unanswered)
        self._unanswered.clear()

    def _read(self, *, block: bool) -> None:
        """Read answers in order: all of them (``block``) or those already here."""
        script = self.engine.scripts.create
        while self._unanswered:
            connection = self._connection
            spec, keys, args = self._unanswered[0]
            popped = False
            try:
                if not block and not connection.can_read(timeout=0):
                    return
                self._unanswered.popleft()
                popped = True
                try:
                    reply = connection.read_response(disable_decoding=True)
                except NoScriptError:
                    # Redis lost create.lua: this create did not run; EVAL runs and caches it.
                    connection.send_command(
                        "EVAL", script.source, len(keys), *keys, *args, check_health=False
                    )
                    self._unanswered.append((spec, keys, args))
                    continue
                except ResponseError as error:
                    log.error("asyncbook: task %s could not be created: %s", spec.id, error)
                    continue
            except _OUTAGE as error:
                if popped:
                    self._unanswered.appendleft((spec, keys, args))  # its answer was lost too
                log.warning("asyncbook: %d create(s) unanswered: %r", len(self._unanswered), error)
                self._drop_connection()
                return
            _check(spec, reply)


def _check(spec: CreateSpec, reply: Any) -> None:
    """Log a create the book refused (the same reading of create.lua's answer as
    ``create``)."""
    try:
        if status_of(spec.id, reply) == ScriptStatus.CONFLICT:
            raise task_exists(spec.id)
    except AsyncBookError as error:
        log.error("asyncbook: task %s could not be created: %s", spec.id, error)
