"""The Lua scripts: their sources with the shared helpers, registered once per book, and
their statuses.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from enum import StrEnum
from importlib import resources
from typing import Any, NamedTuple

from . import _script_args as records
from ._plan import BookScript, ScriptCall

__all__ = [
    "BookScript",
    "SCRIPT_ARGS",
    "BookScripts",
    "EventOutcome",
    "READING_SCRIPTS",
    "ScriptStatus",
    "ScriptedEvents",
    "in_library",
    "library",
    "load_source",
    "with_helpers",
]

FIRST_HELPER = "_task.lua"
"""The helpers in front of every script begin with this file."""
_CREATE = ["_create.lua"]
_HELPERS = [FIRST_HELPER, "_info.lua", "_apply.lua", "_slots.lua"]
"""The shared helpers (_slots.lua: a concurrency key's slots, slots.lua's and claim_run.lua's)."""
_CREATING = frozenset({"create.lua", "resend.lua"})
"""The scripts that create a task (``create_task``, in _create.lua)."""
READING_SCRIPTS = frozenset({"get", "get_many", "info", "resume", "search", "stats", "workers"})
"""The book's scripts that only read (no WAIT after them): _apply.lua's functions stay out
of them (defining them cost each call 23 µs on the server)."""


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
    AFTER = "!after"
    """apply, a call of a batch after one refused for facts: it wrote nothing, and goes
    again behind that one (``_batches``)."""
    KEYS = "!keys"
    """A console read met keys it was not given (their ids follow): nothing was read."""
    AT = "!at"
    """search, asked to peek: the first entries of its walk follow, each an id and its
    position (a sharded page's shares)."""
    MOVED = "!moved"
    """index: the change stream's head is not the batch read (another indexer took it):
    nothing was written."""
    FRESH = "!fresh"
    """apply, for the sweep's stall fail: a heartbeat came in time; nothing changed."""
    HELD = "!held"
    """claim_run: a live attempt holds the task (its attempts, stall time, the server's
    clock and whether to postpone this delivery follow); the record unchanged."""
    STALE = "!stale"
    """claim_run: the attempt holding the task is overdue (its stall time, the server's
    now and the heartbeat timeout follow); nothing written."""
    CONFLICT = "!conflict"
    """create: the id exists (and ``exist_ok`` was not given)."""
    CREATED = "created"
    """create: the task was stored."""
    EXISTS = "exists"
    """create with ``exist_ok``: the id exists; the stored task follows."""


def _lua(name: str) -> str:
    return (resources.files("asyncbook.redis") / "lua" / name).read_text(encoding="utf-8")


def with_helpers(source: str) -> str:
    """``source`` with the shared helpers in front of it: the task helpers and
    ``apply_event`` (one event applied as apply.lua applies it)."""
    return "\n".join([*map(_lua, _HELPERS), source])


@functools.cache
def load_source(name: str) -> str:
    """A script's source, with the shared helpers in front of it (a reading script's
    without ``apply_event``)."""
    if name.removesuffix(".lua") in READING_SCRIPTS:
        return "\n".join([_lua(FIRST_HELPER), _lua("_info.lua"), _lua(name)])
    parts = [*_CREATE, name] if name in _CREATING else [name]
    return with_helpers("\n".join(map(_lua, parts)))


@functools.cache
def library(source: str) -> tuple[str, str]:
    """The book's scripts as one Redis Functions library, its name and source: the
    helpers are its locals, each script the body of a function ``<name>_<script>`` (a
    read's ``no-writes``), which sets KEYS and ARGV (the helpers keep no state of a
    call). ``source`` is "" for the book's own; an ``events_script``'s is a library of
    its own, with one function, ``<name>_events``. (No default: ``library()`` and
    ``library("")`` would be two cache entries, which a patched source can set apart.)"""
    parts = ["local KEYS, ARGV", *map(_lua, [*_HELPERS, *_CREATE])]
    bodies = {"events": source} if source else {name: _lua(f"{name}.lua") for name in SCRIPT_ARGS}
    for name, body in bodies.items():
        flags = "'no-writes'" if name in READING_SCRIPTS else ""
        parts.append(f"redis.register_function{{function_name='@_{name}', flags={{{flags}}},\n")
        parts[-1] += f"callback=function(k, a) KEYS, ARGV = k, a\n{body}\nend}}"
    text = "\n".join(parts)
    lib = "asyncbook_" + hashlib.sha1(text.encode()).hexdigest()[:12]
    return lib, f"#!lua name={lib}\n" + text.replace("function_name='@", f"function_name='{lib}")


def in_library(script: BookScript, name: str, source: str = "") -> BookScript:
    """``script``, called as the function ``name`` of ``library(source)``."""
    lib, script.library = library(source)
    script.function = f"{lib}_{name}".encode()
    script.fcall = "fcall_ro" if name in READING_SCRIPTS else "fcall"
    return script


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


@dataclass(frozen=True)
class BookScripts:
    """One registered script per operation; each field's metadata names its ARGV record."""

    create: BookScript = field(metadata={"args": records.CreateArgs})
    apply: BookScript = field(metadata={"args": records.ApplyArgs})
    cancel: BookScript = field(metadata={"args": records.CancelArgs})
    claim_run: BookScript = field(metadata={"args": records.CancelArgs})
    audit: BookScript = field(metadata={"args": records.RecordAuditArgs})
    get: BookScript = field(metadata={"args": records.NoArgs})
    get_many: BookScript = field(metadata={"args": records.GetManyArgs})
    resume: BookScript = field(metadata={"args": records.ResumeArgs})
    deliver: BookScript = field(metadata={"args": records.DeliverArgs})
    drain: BookScript = field(metadata={"args": records.NoArgs})
    prune: BookScript = field(metadata={"args": records.TaskIdsArgs})
    heartbeat: BookScript = field(metadata={"args": records.TaskIdsArgs})
    seal_group: BookScript = field(metadata={"args": records.SealGroupArgs})
    info: BookScript = field(metadata={"args": records.InfoArgs})
    search: BookScript = field(metadata={"args": records.SearchArgs})
    stats: BookScript = field(metadata={"args": records.StatsArgs})
    workers: BookScript = field(metadata={"args": records.WorkersArgs})
    expire_many: BookScript = field(metadata={"args": records.ExpireManyArgs})
    cancel_many: BookScript = field(metadata={"args": records.CancelManyArgs})
    resend: BookScript = field(metadata={"args": records.ResendArgs})
    index: BookScript = field(metadata={"args": records.IndexArgs})
    output: BookScript = field(metadata={"args": records.OutputArgs})
    slots: BookScript = field(metadata={"args": records.SlotArgs})

    @classmethod
    def register(cls, run: Callable[[ScriptCall], Any] | None = None) -> BookScripts:
        """Every script of the book, each called through ``run`` (no round trip until use)."""
        return cls(
            **{
                name: in_library(BookScript(load_source(f"{name}.lua"), name, run), name)
                for name in SCRIPT_ARGS
            }
        )


SCRIPT_ARGS: dict[str, type[records.ScriptArgs]] = {
    each.name: each.metadata["args"] for each in fields(BookScripts)
}
"""Each book script's ARGV record."""
