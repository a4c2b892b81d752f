"""What a task's record says that names keys, and the info block built from it.

The scripts never build a key name (Redis Cluster's rule; Dragonfly refuses undeclared
keys): the keys of a task's name, group, worker and stats hours come in the info block
(_info.lua), built from the event's worker and hours and what this book learned of the
task (at its create, its start, or a ``!facts`` answer). A script that finds a fact the
block lacks writes nothing and answers ``!facts`` with the record's facts; the call is
sent again with them (a task this book created or started, or without a name or group,
costs one round trip).
"""

from __future__ import annotations

import functools
import json
import math
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from ..errors import DamagedRecordError
from ._keys import KeySchema
from ._plan import Plan, ScriptCall
from ._replies import text_of
from ._script_args import EventArgs, InfoBlockArgs
from ._scripts import ScriptStatus

__all__ = ["FIELDS", "TRIES", "FactBook", "TaskFacts", "facts_of", "hour_of", "info_block"]

_HOUR_MS = 3_600_000
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


def hour_of(ms: float) -> str:
    """The hour a time falls in, as the stats keys spell it (_info.lua's hour_of)."""
    return str(math.floor(ms / _HOUR_MS))


def _start_worker(event: EventArgs) -> str | None:
    return _worker_of(event.event_json) if event.type == "start" and event.event_json else None


@functools.lru_cache(maxsize=64)
def _worker_of(event_json: str) -> str | None:
    # Read twice per call (its block, then ``started``): parsed once.
    worker = json.loads(event_json).get("worker")
    return worker if isinstance(worker, str) and worker else None  # '' names none (_info.lua)


def info_block(
    keys: KeySchema, task_id: str, facts: TaskFacts, events: Sequence[EventArgs], now_ms: float
) -> tuple[list[str], list[str]]:
    """The info block's KEYS and ARGV for these events of a task with these facts."""
    hours: set[str] = set()
    workers = {facts.worker} if facts.worker else set()
    for event in events:
        if event.at_ms:
            hours.add(hour_of(float(event.at_ms)))
        worker = _start_worker(event)
        if worker is not None:
            workers.add(worker)
    if facts.deadline:
        hours.add(hour_of(float(facts.deadline)))
    elif any(event.type in ("deadline", "expire") for event in events):
        hours |= {hour_of(now_ms), hour_of(now_ms - _HOUR_MS)}  # a deadline just passed
    group = json.loads(facts.group_json) if facts.group_json else ""
    block = [
        keys.info(task_id),
        keys.names,
        keys.name_totals,
        keys.workers,
        keys.group(group),
        keys.group_members(group),
    ]
    for hour in sorted(hours):
        block += [keys.stats(int(hour), None), keys.stats(int(hour), facts.name)]
    for worker in sorted(workers):
        block += [keys.worker_tasks(worker), keys.worker_counts(worker)]
    argv = InfoBlockArgs(
        facts.name,
        facts.group_json,
        ",".join(sorted(hours)),
        json.dumps(sorted(workers), ensure_ascii=False),
    )
    return block, argv.argv()


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

    def started(self, task_id: str, events: Iterable[EventArgs]) -> None:
        """A start sent for a task makes its worker the task's last worker."""
        for event in events:
            worker = _start_worker(event)
            if worker is not None:
                self.learn(task_id, (self.get(task_id) or TaskFacts())._replace(worker=worker))

    def block(self, task_id: str, events: Sequence[EventArgs]) -> tuple[list[str], list[str]]:
        """The info block for these events of a task, from what is known of it."""
        facts = self.get(task_id) or TaskFacts()
        return info_block(self.keys, task_id, facts, events, self.clock())

    def run(
        self,
        task_id: str,
        events: Sequence[EventArgs],
        call: Callable[[list[str], list[str]], ScriptCall],
    ) -> Plan[Any]:
        """The reply to ``call(block KEYS, block ARGV)``, sent again with the record's
        facts while it answers ``!facts`` (a plan, ``_plan``)."""
        for _ in range(TRIES):
            reply = yield call(*self.block(task_id, events))
            facts = facts_of(reply)
            if facts is None:
                self.started(task_id, events)
                return reply
            self.learn(task_id, facts)
        raise DamagedRecordError(task_id, "its name, group or worker changed at every try")
