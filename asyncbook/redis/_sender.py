"""``CreateSender``: a publisher's creates written to a connection of the sender's own at
once, their answers read later, in order, a batch at a time (``collect``): nothing waits
for a round trip, and no thread is involved.

When the book waits for replicas (``wait_replicas``), a ``WAIT`` follows the creates on the
same connection (one behind every ``_READ_AFTER`` creates, and one behind the last before
``collect`` reads): a create is acknowledged when the answer of the ``WAIT`` behind it is
read. One that counted too few replicas leaves its creates unacknowledged (each ran on
the primary; a failover may lose it): ``take_unanswered`` hands them back with those an
outage left unanswered, to be sent again.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any

from redis.exceptions import ClusterDownError, MovedError, NoScriptError, ResponseError

from .._book import CreateSpec
from .._models import AsyncTask
from ..errors import AsyncBookError, NotReplicatedError
from ._connection import RedisUnavailableError, rediscover
from ._creating import create_args, created_on
from ._driver import script_texts
from ._engine import Engine
from ._lane import packed
from ._pipe import OUTAGE, Pipe
from ._plan import ScriptCall
from ._script_args import CreateArgs

__all__ = ["CreateSender"]

log = logging.getLogger(__name__)

_READ_AFTER = 64
"""Answers left unread before ``send`` reads those that have arrived."""
_Sent = tuple[CreateSpec, AsyncTask, list[str], CreateArgs]


class CreateSender:
    """``create`` calls written to Redis at once, their answers read later.

    ``send`` raises ``RedisUnavailableError`` when it could not write; ``take_unanswered``
    then hands back the creates not yet answered (each may or may not have run: one with
    ``exist_ok`` can be sent again safely).
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._lock = threading.Lock()
        self._pipe: Pipe[_Sent | None] = Pipe(self._new_connection)
        """What was written and not answered: creates, and None for a ``WAIT``."""
        self._unconfirmed: list[CreateSpec] = []
        """Creates answered, the ``WAIT`` behind them not yet (``wait_replicas``)."""
        self._uncovered = 0
        """Creates written since the last ``WAIT``."""
        self._lost: list[CreateSpec] = []
        self._moved = False
        """A Cluster node answered MOVED: the next connection goes to the slot's node."""

    def send(self, spec: CreateSpec) -> None:
        """Write one create; a spec Python refuses raises its ``AsyncBookError``."""
        sent = (spec, *create_args(self.engine.layout, spec))
        with self._lock:
            try:
                self._connect()
                self._write("EVALSHA", self.engine.scripts.create.sha_bytes, sent)
                self._pipe.sent(sent)
            except OUTAGE as error:
                self._drop_connection()
                raise RedisUnavailableError(f"the book's Redis did not answer: {error}") from error
            if self.engine.wait.replicas:
                self._uncovered += 1
            if len(self._pipe) >= _READ_AFTER or self._uncovered >= _READ_AFTER:
                self._read(block=False)

    def pending(self) -> bool:
        """True while answers (or, with ``wait_replicas``, their ``WAIT``'s) are due."""
        return bool(len(self._pipe)) or bool(self._unconfirmed)

    def collect(self) -> None:
        """Read every answer still due (waits for them); errors are logged."""
        with self._lock:
            self._read(block=True)

    def settle(self) -> None:
        """Read the answers already here, without waiting (a ``WAIT`` first, if due)."""
        with self._lock:
            self._read(block=False, cover=True)

    def close(self) -> None:
        """Read what is due, then close the connection (the next ``send`` opens one)."""
        with self._lock:
            if self._pipe.open:
                self._read(block=True)
                self._drop_connection()

    def take_unanswered(self) -> list[CreateSpec]:
        """The creates whose answers were lost with the connection (to send again)."""
        with self._lock:
            lost, self._lost = self._lost, []
        return lost

    def _connect(self) -> None:
        if self._pipe.forked():  # a forked child: the parent's socket and creates are not ours
            self._unconfirmed.clear()
            self._uncovered = 0
        if self._moved and not len(self._pipe) and not self._unconfirmed:
            self._moved = False
            self._drop_connection()

    def _new_connection(self) -> Any:
        """A new connection to the slot's node, ``create.lua`` loaded on it."""
        connection = self.engine.slot_client().connection_pool.make_connection()
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
            with contextlib.suppress(*OUTAGE):
                connection.disconnect()
            raise
        return connection

    def _drop_connection(self) -> None:
        self._lost.extend(self._unconfirmed)
        self._lost.extend(sent[0] for sent in self._pipe.drop() if sent is not None)
        self._unconfirmed.clear()
        self._uncovered = 0

    def _write(self, command: str, script: bytes | str, sent: _Sent) -> None:
        """Write a create's EVALSHA (``script``: its SHA) or EVAL (its source)."""
        _spec, _task, keys, args = sent
        texts = script_texts(ScriptCall("create", keys, args.argv()))
        connection = self._pipe.connection()
        wire = packed(connection, command, script, len(keys), *texts)
        connection.send_packed_command(wire, check_health=False)

    def _send_wait(self) -> None:
        """Write ``WAIT`` behind the creates written so far (``wait_replicas``)."""
        wait = self.engine.wait
        self._pipe.connection().send_command(
            "WAIT", wait.replicas, wait.timeout_ms, check_health=False
        )
        self._pipe.sent(None)
        self._uncovered = 0

    def _confirm(self, acknowledged: Any) -> None:
        """Read a ``WAIT``'s reply: the creates answered before it are acknowledged, or,
        on too few replicas, handed back to be sent again."""
        try:
            self.engine.wait.check(acknowledged)
        except (NotReplicatedError, ResponseError, RedisUnavailableError) as error:
            log.warning(
                "asyncbook: %d create(s) not acknowledged, to be sent again: %s",
                len(self._unconfirmed),
                error,
            )
            self._lost.extend(self._unconfirmed)
            if isinstance(error, RedisUnavailableError):
                self._slot_moved()  # a replica now: the next connection goes elsewhere
        self._unconfirmed.clear()

    def _read(self, *, block: bool, cover: bool = False) -> None:
        """Read answers in order, all (``block``) or those here; a ``WAIT`` first if due."""
        try:
            uncovered = self._uncovered >= (1 if block or cover else _READ_AFTER)
            if uncovered and self._pipe.open:
                self._send_wait()
            # Creates are read undecoded (their answers hold the record); a WAIT's too.
            for sent, reply in self._pipe.replies(block=block, disable_decoding=True):
                if sent is None:
                    self._confirm(reply)
                elif isinstance(reply, NoScriptError):
                    # Redis lost create.lua: this create did not run; EVAL runs and caches it.
                    self._pipe.sent(sent)  # due first: an outage hands it back
                    self._write("EVAL", self.engine.scripts.create.source, sent)
                    if self.engine.wait.replicas:
                        self._send_wait()
                else:
                    self._answered(sent, reply)
        except OUTAGE as error:
            log.warning("asyncbook: %d create(s) unanswered: %r", len(self._pipe), error)
            self._drop_connection()

    def _answered(self, sent: _Sent, reply: Any) -> None:
        """Read a create's answer (``created_on``, as ``create`` reads it): a create the
        book refused is logged, one a Cluster node did not run is handed back."""
        spec, task, _keys, args = sent
        if isinstance(reply, MovedError | ClusterDownError):
            # Not run: the slot moved (a Cluster failover). Sent again, elsewhere.
            log.warning("asyncbook: task %s to be created again: %s", spec.id, reply)
            self._lost.append(spec)
            self._slot_moved()
            return
        try:
            if isinstance(reply, ResponseError):
                raise reply
            created_on(self.engine.layout, spec.id, task, reply, args)
        except (AsyncBookError, ResponseError, ValueError) as error:
            log.error("asyncbook: task %s could not be created: %s", spec.id, error)
            return
        if self.engine.wait.replicas:
            self._unconfirmed.append(spec)

    def _slot_moved(self) -> None:
        """A Cluster failover: the next connection goes to the slot's node."""
        if not self._moved:
            self._moved = True
            rediscover(self.engine)
