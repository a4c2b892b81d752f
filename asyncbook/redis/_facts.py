"""What a task's record says that names keys, and the info block built from it.

The scripts never build a key name (Redis Cluster's rule; Dragonfly refuses undeclared
keys): the keys of a task's group come in the info block (_info.lua), built from what
this book learned of the task (at its create, or a ``!facts`` answer). A script that
finds a fact the block lacks writes nothing and answers ``!facts`` with the record's
facts; the call is sent again with them (a task this book created, or without a group,
costs one round trip). The console's keys (a task's name, worker, stats hours) are the
indexer's (``_indexer``), off the write path.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from ..errors import DamagedRecordError
from ._keys import KeySchema
from ._plan import Plan, ScriptCall
from ._replies import text_of
from ._script_args import InfoBlockArgs
from ._scripts import ScriptStatus

__all__ = ["FIELDS", "TRIES", "FactBook", "TaskFacts", "facts_of", "info_block"]

_KEEP = 10_000
"""How many tasks' facts a book remembers (the oldest are forgotten first)."""
TRIES = 4
"""A block is sent again at most this often: each time the record's facts changed."""


class TaskFacts(NamedTuple):
    """A task record's facts that name keys ('' where it has none or it is not known)."""

    name: str = ""
    group_json: str = ""
    """The group id as the record stores it (JSON)."""
    worker: str = ""
    """The worker of the last attempt."""
    deadline: str = ""
    """JSON number text."""

    @classmethod
    def of_fields(cls, values: Sequence[Any]) -> TaskFacts:
        """The facts from an HMGET of FIELDS on the task's hash (or a ``!facts`` answer)."""
        return cls(*(text_of(value) if value else "" for value in values))


FIELDS = ("n", "gid", "w", "exp")
"""The task hash's fields that hold its facts (_task.lua), in TaskFacts order."""


def info_block(keys: KeySchema, task_id: str, facts: TaskFacts) -> tuple[list[str], list[str]]:
    """The info block's KEYS and ARGV for a task with these facts."""
    group = json.loads(facts.group_json) if facts.group_json else ""
    block = [keys.info(task_id), keys.group(group), keys.group_members(group)]
    return block, InfoBlockArgs(facts.group_json).argv()


def facts_of(reply: Any) -> TaskFacts | None:
    """The facts of a ``!facts`` answer; None for any other answer."""
    if not isinstance(reply, list) or not reply or text_of(reply[0]) != ScriptStatus.FACTS:
        return None
    return TaskFacts.of_fields(reply[1:5])


class FactBook:
    """The facts a book learned, per task id (bounded), and the calls that use them."""

    def __init__(self, keys: KeySchema, clock: Callable[[], float]) -> None:
        self.keys = keys
        self.clock = clock
        self._known: dict[str, TaskFacts] = {}
        self._lock = threading.Lock()  # a book is shared by threads (pools, the server)

    def get(self, task_id: str) -> TaskFacts | None:
        """What is known of a task, or None."""
        return self._known.get(task_id)

    def learn(self, task_id: str, facts: TaskFacts) -> None:
        """Remember a task's facts (the latest win)."""
        with self._lock:
            self._known.pop(task_id, None)
            self._known[task_id] = facts
            if len(self._known) > _KEEP:
                del self._known[next(iter(self._known))]

    def block(self, task_id: str) -> tuple[list[str], list[str]]:
        """The info block for a task, from what is known of it."""
        return info_block(self.keys, task_id, self.get(task_id) or TaskFacts())

    def run(self, task_id: str, call: Callable[[list[str], list[str]], ScriptCall]) -> Plan[Any]:
        """The reply to ``call(block KEYS, block ARGV)``, sent again with the record's
        facts while it answers ``!facts`` (a plan, ``_plan``)."""
        for _ in range(TRIES):
            reply = yield call(*self.block(task_id))
            facts = facts_of(reply)
            if facts is None:
                return reply
            self.learn(task_id, facts)
        raise DamagedRecordError(task_id, "its group changed at every try")
