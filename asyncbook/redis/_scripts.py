"""The Lua scripts: registered once per book, their arguments and their statuses.

Each script's positional ARGV is built from one record below whose fields are the
script's header, in order (a test holds the two together).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from importlib import resources
from typing import Any, NamedTuple

from redis.commands.core import Script
from redis.exceptions import NoScriptError

__all__ = [
    "ApplyArgs",
    "BookScript",
    "BookScripts",
    "CreateArgs",
    "DeliverArgs",
    "EventArgs",
    "EventOutcome",
    "GetManyArgs",
    "ResumeArgs",
    "ScriptStatus",
    "ScriptedEvents",
    "load_source",
    "with_helpers",
]

FIRST_HELPER = "_task.lua"
"""The helpers in front of every script begin with this file."""
_INFO = "_info.lua"
_APPLY = "_apply.lua"


class ScriptStatus(StrEnum):
    """The first element of a script's answer where it is neither a reason nor a mode."""

    UNKNOWN = "!unknown"
    """The task does not exist."""
    SHAPE = "!shape"
    """apply: the event was malformed; Python raises the shape error it found."""
    INVALID = "!invalid"
    """apply: a rule refused a value; the field and the message follow."""
    DAMAGED = "!damaged"
    """The task's record lost parts of itself (eviction); why follows."""
    FACTS = "!facts"
    """A script whose info block lacks a fact of the task's record (its name, group,
    worker, deadline, which follow): it wrote nothing (_facts.py)."""
    KEYS = "!keys"
    """A console read met keys it was not given (their ids follow): nothing was read."""
    FRESH = "!fresh"
    """apply, for the sweep's stall fail: a heartbeat came in time; nothing changed."""
    CONFLICT = "!conflict"
    """create: the id exists (and ``exist_ok`` was not given)."""
    CREATED = "created"
    """create: the task was stored."""
    EXISTS = "exists"
    """create with ``exist_ok``: the id exists; the stored task follows."""
    EXISTING = "existing"
    """deliver: the key was used before; its receipt follows."""


def _flag(value: bool) -> str:
    return "1" if value else "0"


class CreateArgs(NamedTuple):
    """ARGV of create.lua."""

    task_id: str
    task_id_json: str
    deadline: str
    """JSON number text."""
    max_attempts: int
    exist_ok: bool
    changes_channel: str
    heartbeat_timeout_ms: int | None = None
    retry_on_stall: bool = False
    group_id_json: str = ""
    """The group the task belongs to, as JSON; '' for none."""
    created_ms: str = ""
    """JSON number text."""
    name: str = ""
    queue: str = ""
    parent_id: str = ""
    root_id: str = ""
    args: str = ""
    kwargs: str = ""
    children_keep_ms: str = ""
    """How long a parent's list of children is kept; '' for ever."""

    def argv(self) -> list[str]:
        """The positional ARGV."""
        timeout = self.heartbeat_timeout_ms
        return [
            self.task_id,
            self.task_id_json,
            self.deadline,
            str(self.max_attempts),
            _flag(self.exist_ok),
            self.changes_channel,
            "" if timeout is None else str(timeout),
            _flag(self.retry_on_stall),
            self.group_id_json,
            self.created_ms,
            self.name,
            self.queue,
            self.parent_id,
            self.root_id,
            self.args,
            self.kwargs,
            self.children_keep_ms,
        ]


class EventArgs(NamedTuple):
    """ARGV 4..12 of apply.lua: one event, checked for shape in Python."""

    type: str
    """start | progress | succeed | fail | expire, or ``deadline`` (expire at the deadline)."""
    at_ms: str = ""
    """JSON number text; '' when not a finite number (the script refuses it)."""
    event_json: str = ""
    """The event as recorded in the history; '' when it must not be recorded."""
    progress: str = ""
    """JSON number text; '' when not a finite number."""
    retryable: bool = False
    result_hash: str = ""
    result_ref_blank: bool = False
    result_hash_blank: bool = False
    error_json: str = ""


NO_EVENT = EventArgs(type="")
"""The event slots of a call whose event was malformed (the script answers ``!shape``)."""
AT_DEADLINE = EventArgs(type="deadline")
"""The event slots of an expiry at the task's own deadline."""


class ApplyArgs(NamedTuple):
    """ARGV of apply.lua."""

    task_id: str
    callback_given: bool
    event_valid: bool
    event: EventArgs
    retention_ms: str
    """Whole milliseconds; '' keeps ended tasks forever."""
    changes_channel: str
    with_history: bool
    only_if_stalled: bool = False
    cursor: str = ""
    """A progress event's cursor: the task's checkpoint."""
    failure: str = ""
    """A fail event's exception type and traceback (JSON object), for the task's info."""

    def argv(self) -> list[str]:
        """The positional ARGV."""
        e = self.event
        return [
            self.task_id,
            _flag(self.callback_given),
            _flag(self.event_valid),
            e.type,
            e.at_ms,
            e.event_json,
            e.progress,
            _flag(e.retryable),
            e.result_hash,
            _flag(e.result_ref_blank),
            _flag(e.result_hash_blank),
            e.error_json,
            self.retention_ms,
            self.changes_channel,
            _flag(self.with_history),
            _flag(self.only_if_stalled),
            self.cursor,
            self.failure,
        ]


class ResumeArgs(NamedTuple):
    """ARGV of resume.lua."""

    cursor: int
    retention_versions: int
    with_full_task: bool

    def argv(self) -> list[str]:
        """The positional ARGV."""
        return [str(self.cursor), str(self.retention_versions), _flag(self.with_full_task)]


class DeliverArgs(NamedTuple):
    """ARGV of deliver.lua."""

    key_json: str
    now_ms: str
    """JSON number text."""
    retention_ms: str

    def argv(self) -> list[str]:
        """The positional ARGV."""
        return [self.key_json, self.now_ms, self.retention_ms]


class GetManyArgs(NamedTuple):
    """ARGV of get_many.lua."""

    with_histories: bool

    def argv(self) -> list[str]:
        """The positional ARGV."""
        return [_flag(self.with_histories)]


def _lua(name: str) -> str:
    return (resources.files("asyncbook.redis") / "lua" / name).read_text(encoding="utf-8")


def with_helpers(source: str) -> str:
    """``source`` with the shared helpers in front of it: the task helpers and
    ``apply_event`` (one event applied as apply.lua applies it)."""
    return "\n".join([_lua(FIRST_HELPER), _lua(_INFO), _lua(_APPLY), source])


def load_source(name: str) -> str:
    """A script's source, with the shared helpers in front of it."""
    return with_helpers(_lua(name))


class EventOutcome(NamedTuple):
    """A compact answer to one event (apply_event with ARGV[15] = 'c'): the reason and
    flags of a ``CallbackResult`` and the task's state and error, without the task."""

    reason: str
    changed: bool
    duplicate: bool
    notify: bool
    duplicate_callback: bool
    state: str
    error: str | None
    """The task's error text, when it has one."""


class ScriptedEvents(NamedTuple):
    """What a script of ``RedisBook.apply_in_script`` answered."""

    status: str
    """The script's own status (the first element of its answer)."""
    state: str
    """The task's state after the events ('' when the book does not hold it)."""
    outcomes: list[Any]
    """One per event: an ``EventOutcome``, or the ``AsyncBookError`` the event met."""


class BookScript:
    """One script, called by EVALSHA; after NOSCRIPT, by EVAL with its source.

    NOSCRIPT means the script did not run, so calling again is safe. EVAL (rather than
    SCRIPT LOAD then EVALSHA, which another client's ``SCRIPT FLUSH`` can race) always
    runs, and caches the script for the next EVALSHA.
    """

    def __init__(self, script: Script, client: Any) -> None:
        self.script = script
        self.client = client

    @property
    def sha(self) -> str:
        """The SHA1 Redis knows the script by."""
        return str(self.script.sha)

    @property
    def source(self) -> str:
        """The Lua source."""
        return str(self.script.script)

    def __call__(self, keys: Sequence[str], args: Sequence[Any] = ()) -> Any:
        try:
            return self.client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            return self.client.eval(self.source, len(keys), *keys, *args)


@dataclass(frozen=True)
class BookScripts:
    """One registered script per operation."""

    create: BookScript
    apply: BookScript
    get: BookScript
    get_many: BookScript
    resume: BookScript
    deliver: BookScript
    drain: BookScript
    prune: BookScript
    heartbeat: BookScript
    seal_group: BookScript
    info: BookScript
    search: BookScript
    stats: BookScript
    workers: BookScript

    @classmethod
    def register(cls, client: Any) -> BookScripts:
        """Register every script on ``client`` (no round trip until first use)."""
        names = [
            "create",
            "apply",
            "get",
            "get_many",
            "resume",
            "deliver",
            "drain",
            "prune",
            "heartbeat",
            "seal_group",
            "info",
            "search",
            "stats",
            "workers",
        ]
        return cls(
            **{
                name: BookScript(client.register_script(load_source(f"{name}.lua")), client)
                for name in names
            }
        )
