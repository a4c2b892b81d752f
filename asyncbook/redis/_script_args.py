"""Each Lua script's ARGV as one typed record (``ScriptArgs``). What a slot means is said
once, in the script's header."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar, cast, dataclass_transform

__all__ = [
    "AT_DEADLINE",
    "NO_EVENT",
    "ApplyArgs",
    "AuditArgs",
    "CancelArgs",
    "CancelManyArgs",
    "CreateArgs",
    "DeliverArgs",
    "EventArgs",
    "ExpireManyArgs",
    "GetManyArgs",
    "IndexArgs",
    "InfoArgs",
    "InfoBlockArgs",
    "NoArgs",
    "OutputArgs",
    "RecordAuditArgs",
    "ResumeArgs",
    "ResendArgs",
    "ScriptArgs",
    "SealGroupArgs",
    "SlotArgs",
    "SearchArgs",
    "StatsArgs",
    "TaskIdsArgs",
    "WorkersArgs",
    "expiry_slots",
]


@dataclass_transform(frozen_default=True)
class _Record(type):
    """Makes each record a frozen dataclass with slots, and notes its field names."""

    def __new__(mcs, name: str, bases: tuple[type, ...], body: dict[str, Any]) -> _Record:
        made = super().__new__(mcs, name, bases, body)
        if "__slots__" in body:  # ScriptArgs, or the class dataclass(slots=True) made
            return made
        record: Any = dataclass(frozen=True, slots=True)(cast(Any, made))
        record.names = tuple(field.name for field in fields(record))
        return cast(_Record, record)


class ScriptArgs(metaclass=_Record):
    """One script's ARGV: the fields, in order, are the names its header binds
    (``local <field> = ARGV[<n>]``; a test holds the two together). A field that is a
    record stands for its fields; a tuple for its items (a variable tail); a flag is
    ``1``/``0``, None ``''``, a number its decimal text and bytes go as they are."""

    __slots__ = ()
    names: ClassVar[tuple[str, ...]] = ()  # the fields, in order

    def argv(self) -> list[str]:
        """The positional ARGV."""
        out: list[Any] = []
        append = out.append
        for name in self.names:
            value = getattr(self, name)
            if type(value) is str:  # most fields: no dispatch (this runs per event)
                append(value)
            else:
                _put(out, value)
        return out


def _put(out: list[Any], value: object) -> None:
    if isinstance(value, str | bytes):
        out.append(value)
    elif isinstance(value, bool):
        out.append("1" if value else "0")
    elif value is None:
        out.append("")
    elif isinstance(value, ScriptArgs):
        out.extend(value.argv())
    elif isinstance(value, tuple):
        for item in value:
            _put(out, item)
    else:
        out.append(str(value))


class CreateArgs(ScriptArgs):
    task_id: str
    task_id_json: str
    deadline: str  # JSON number text
    max_attempts: int
    exist_ok: bool
    changes_channel: str
    heartbeat_timeout_ms: int | None = None
    retry_on_stall: bool = False
    group_id_json: str = ""  # the group the task belongs to, as JSON; '' for none
    created_ms: str = ""  # JSON number text
    name: str = ""
    queue: str = ""
    parent_id: str = ""
    root_id: str = ""
    args: str = ""
    kwargs: str = ""
    children_keep_ms: str = ""  # how long a parent's list of children is kept; '' for ever
    message: str = ""  # the message as published (KeptMessage JSON), for a resend; '' none
    message_keep_ms: str = ""  # the kept message's life (the task's and retention); '' ever
    trace: str = ""  # the publish's trace context (PublishInfo.trace); '' none


class ResendArgs(ScriptArgs):
    """ARGV of resend.lua: the new task's create, then the resend's own."""

    create: CreateArgs
    original_id: str
    audit: AuditArgs  # who asked (actor '': not said, no entry) and why: the original's trail


class EventArgs(ScriptArgs):
    """ARGV 4..12 of apply.lua: one event, checked for shape in Python."""

    type: str  # start | progress | succeed | fail | expire, or deadline (at the deadline)
    at_ms: str = ""  # JSON number text; '' when not a finite number (the script refuses it)
    event_json: str = ""  # the event as recorded in the history; '' when it must not be recorded
    progress: str = ""  # JSON number text; '' when not a finite number
    retryable: bool = False
    result_hash: str = ""
    result_ref_blank: bool = False
    result_hash_blank: bool = False
    error_json: str = ""


NO_EVENT = EventArgs(type="")
"""The event slots of a call whose event was malformed (the script answers ``!shape``)."""
AT_DEADLINE = EventArgs(type="deadline")
"""The event slots of an expiry at the task's own deadline."""


TAKEN = "taken"
"""``ApplyArgs.callback_given`` for an id another task holds."""


class ApplyArgs(ScriptArgs):
    """ARGV of apply.lua (apply_args in _apply.lua): one event's slots, which scripts
    that apply several events repeat per event; the info block's follow."""

    task_id: str
    callback_given: bool | str  # or TAKEN: another task holds the id (_claims)
    event_valid: bool
    event: EventArgs
    retention_ms: str  # whole milliseconds; '' keeps ended tasks forever
    changes_channel: str
    with_history: bool | str  # or "c": a compact answer (_apply.lua)
    only_if_stalled: bool | str = False  # or "u": a start unless a live run holds the task
    cursor: str = ""  # a progress event's cursor: the task's checkpoint
    failure: str = ""  # a fail's exception type and traceback (JSON), for the task's info

    @property
    def marker_hash(self) -> list[str]:  # the other task's hash an x marker reads: in KEYS
        return [g[3 + int(g[1:3]) :]] if (g := str(self.callback_given))[:1] == "x" else []


class InfoBlockArgs(ScriptArgs):
    """The info block's ARGV (INFO_ARGV in _info.lua), after a writing script's own."""

    group_id_json: str  # the task's group's id as JSON ('' for none)


class AuditArgs(ScriptArgs):
    """An audit entry's slots (write_audit, _task.lua): who, what, why, and the caps."""

    actor: str
    action: str
    reason_given: bool
    reason: str
    log_cap: int  # entries the namespace's log keeps, near (XADD MAXLEN ~); the task's exactly
    task_cap: int


class CancelArgs(ScriptArgs):
    """ARGV of cancel.lua and claim_run.lua: apply.lua's slots, then the audit's (the
    info block's follow)."""

    apply: ApplyArgs
    audit: AuditArgs


class RecordAuditArgs(ScriptArgs):
    """ARGV of audit.lua: an entry for a change another call made, and its outcome."""

    task_id: str
    audit: AuditArgs
    outcome: str
    retried_as: str = ""  # a resend's new task ('' when none)


class ResumeArgs(ScriptArgs):
    cursor: int  # the version the client saw
    retention_versions: int
    with_full_task: bool


class DeliverArgs(ScriptArgs):
    key_json: str
    now_ms: str  # JSON number text
    retention_ms: str


class InfoArgs(ScriptArgs):
    children_listed: int  # how many of the ids of the task's children to list


class IndexArgs(ScriptArgs):
    first_id: str  # the batch's first entry id on the index's change stream
    last_id: str  # its last; then the batch's writes (index.lua's ops)


class OutputArgs(ScriptArgs):
    """ARGV of output.lua; the chunks follow its slots."""

    retention_ms: str  # '' keeps the stream
    max_chunks: int  # the most chunks the task's output may hold
    max_bytes: int  # the most bytes it may hold


class NoArgs(ScriptArgs):
    """ARGV of get.lua and drain.lua: none."""


class GetManyArgs(ScriptArgs):
    with_histories: bool  # the listed tasks come with their histories


class TaskIdsArgs(ScriptArgs):
    """ARGV of heartbeat.lua and prune.lua: every slot a task id, one per task hash in
    KEYS (from 3 on for heartbeat.lua, from 2 on for prune.lua)."""

    task_ids: tuple[str, ...]


class SlotArgs(ScriptArgs):
    """ARGV of slots.lua: take or free a slot of a concurrency key (``asyncbook._slots``)."""

    op: str  # 'take' or 'release'
    task_id: str
    limit: int
    lease_ms: int
    payload: str  # what runs the task again, kept while it waits ('' for a release)


class SealGroupArgs(ScriptArgs):
    group_id_json: str
    total: int
    now_ms: int
    retention_ms: str  # '' keeps the group forever
    sharded: bool = False


class SearchArgs(ScriptArgs):
    given_ids_json: str  # ids whose task hash, history and info hash follow the indexes (JSON)
    order: str  # desc | asc
    limit: int
    cursor_given: str  # the previous page's cursor; '' from the start
    state: str
    name: str
    q: str  # an id prefix, one of ``names_json`` or (``text``) text; '' any
    since_ms: int | None
    until_ms: int | None
    budget: int  # how many index entries one walk may examine
    totals_by: str  # card | count
    names_json: str = "[]"  # the task names ``q`` matches (JSON array)
    text: bool = False  # ``q`` also matches a task's args, kwargs, exception, traceback or error
    worker: str = ""  # checked per task with a sort index ('' any)
    sort_field: str = ""  # '' creation order; else the field whose sort index is KEYS[1]
    unnamed: bool = False  # only tasks without a name
    peek: bool = False


class StatsArgs(ScriptArgs):
    window_ms: int
    now_ms: int | None  # None for the server's clock
    keys_first_hour: int  # the hour of the first stats key in KEYS


class WorkersArgs(ScriptArgs):
    seen_since_ms: int | float
    workers_listed: int
    running_looked_at: int
    running_ids_json: str  # the running ids whose task hashes follow in KEYS (JSON array)
    workers_json: str  # the workers whose counts hashes follow in KEYS (JSON array)


class ExpireManyArgs(ScriptArgs):
    """ARGV of expire_many.lua, all of it one list (``slots``) in its header's order:
    ``expiry_slots`` builds it."""

    slots: tuple[str, ...]


class CancelManyArgs(ScriptArgs):
    """ARGV of cancel_many.lua, all of it one list (``slots``): ``expiry_slots`` builds it,
    the audit's slots (``AuditArgs``) after the cancel's."""

    slots: tuple[str, ...]


def expiry_slots(
    blocks: Sequence[tuple[int, Sequence[str]]],
    event: ApplyArgs,
    tasks: Sequence[tuple[str, int]],
    own: ScriptArgs | None = None,
) -> tuple[str, ...]:
    """expire_many.lua's ARGV (and cancel_many.lua's): ``blocks`` (each its key count and
    ``InfoBlockArgs``'s ARGV), the event's slots, the script's ``own`` (cancel_many's
    audit), then the tasks (each its id and block number)."""
    out: list[str] = [str(len(blocks))]
    for key_count, info in blocks:
        out.append(str(key_count))
        out += info
    out += event.argv()
    if own is not None:
        out += own.argv()
    for task_id, block in tasks:
        out += (task_id, str(block))
    return tuple(out)
