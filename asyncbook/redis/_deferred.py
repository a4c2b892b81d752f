"""``DeferredWrites``: an events script's calls (``BesideScript``) written to a connection
of their own at once, in order, their answers read later (as ``CreateSender`` sends
creates): the caller does not wait for Redis to run them.

A call goes by FCALL (EVALSHA where the client calls no functions) on the connection;
its answer, read later, goes into the same plan ``apply_in_script`` runs, and what the
plan asks for after it (the record's facts, a call Redis did not run for want of its
script or library: sent again by ``Engine.execute``, which loads them) is sent and
waited for then. A lost connection loses the answers not yet read: ``read`` hands
those calls back as ``LOST`` (each may or may not have run: the caller writes it again).
One slot, no ``wait_replicas`` (``BesideScript.sender`` makes none otherwise).
"""

from __future__ import annotations

from typing import Any

from redis.exceptions import ResponseError

from .._book import ScriptedWrite
from . import _batches as batches
from ._driver import answered, queued
from ._engine import Engine
from ._lane import packed
from ._pipe import OUTAGE, Pipe
from ._plan import BookScript, ScriptCall, advance

__all__ = ["LOST", "DeferredWrites"]

_Due = tuple[Any, Any, ScriptCall]
"""(the caller's token, the plan waiting for the answer, the call)."""
LOST = ConnectionError("the connection was lost before the answer was read")
"""``read``'s answer for a call whose answer a lost connection took (it may have run)."""


class DeferredWrites:
    """Script calls with a task's events, written at once, answered later (``read``).
    Not thread-safe: its owner holds a lock around it."""

    def __init__(self, engine: Engine, script: BookScript) -> None:
        self.engine = engine
        self.script = script
        self._pipe: Pipe[_Due] = Pipe(self._connect)

    def __len__(self) -> int:
        return len(self._pipe)

    def send(self, write: ScriptedWrite, token: Any) -> bool:
        """Write ``write``'s call; False when it was not (an outage, an event refused in
        Python: the caller writes it and waits). What the plan needs before the call (the
        server check) runs first."""
        task_id, items, key, args, name, group_id = write
        call = (self.script, key, args)
        plan = batches.apply_in_script(self.engine.layout, task_id, items, call, name, group_id)
        try:
            done, step = advance(plan, None, None)
            while not done and not (type(step) is ScriptCall and step.script is self.script):
                done, step = self._step(plan, step)
            if done:  # answered without the call (nothing Redis must run)
                self._pipe.settled((token, step, step))
                return True
            connection = self._pipe.connection()
            sent_as = (queued(self.engine, step) or [])[0]  # FCALL, or EVALSHA without functions
            wire = packed(connection, sent_as.name.upper(), *sent_as.args)
            connection.send_packed_command(wire, check_health=False)
        except OUTAGE:
            self._pipe.close()  # what is due is read back as lost
            return False
        except Exception:  # refused before the call (an event Python refuses): the
            return False  # caller's write meets it again, and handles it as it does
        self._pipe.sent((token, plan, step))
        return True

    def read(self, *, block: bool, keep: int = 0) -> list[tuple[Any, Any]]:
        """(token, answer) of the calls answered, in order: all but the last ``keep``
        (``block``: waits for them) or those already here. An answer is the plan's
        (``ScriptedEvents``), the error it raised, or ``LOST``."""
        answered: list[tuple[Any, Any]] = []
        self._pipe.forked()
        try:
            for (token, plan, step), reply in self._pipe.replies(block=block, keep=keep):
                if step is plan:  # answered when sent
                    answered.append((token, plan))
                    continue
                error = reply if isinstance(reply, ResponseError) else None
                answered.append((token, self._finish(plan, step, reply, error)))
        except OUTAGE:
            self._pipe.close()
        if not self._pipe.open:  # lost, now or while sending: what is due went with it
            answered += [
                (token, plan if step is plan else LOST) for token, plan, step in self._pipe.drop()
            ]
        return answered

    def _finish(self, plan: Any, step: Any, reply: Any, error: Exception | None) -> Any:
        """The plan's answer, given the call's reply: read as a call sent alone
        (``_driver.answered``: one Redis did not run goes again, EVAL or FUNCTION LOAD),
        and the plan's next steps are waited on."""
        try:
            reply, error = answered(self.engine, step, [reply if error is None else error])
            done, step = advance(plan, reply, error)
            while not done:
                done, step = self._step(plan, step)
        except Exception as met:  # an outage meanwhile, the plan's own error
            return met
        return step

    def _step(self, plan: Any, step: Any) -> tuple[bool, Any]:
        """Run ``step`` on the engine, waiting for it; the plan's next (raises an outage)."""
        try:
            reply, error = self.engine.execute(step), None
        except OUTAGE:
            raise
        except Exception as met:
            reply, error = None, met
        return advance(plan, reply, error)

    def _connect(self) -> Any:
        connection = self.engine.slot_client().connection_pool.make_connection()
        connection.connect()
        return connection
