"""Resend: a failed, expired or cancelled task's kept message sent again as a new task,
linked both ways (an operator's action; Celery's ``Task.retry`` is another thing).

resend.lua decides, one call per task: a task resent once is never resent again,
whoever asks twice at once. Publishing the kept message under the new id is the caller's:
this layer knows no broker (``asyncbook.celery.Resender`` publishes through kombu).

Given an actor, every answer for a task that exists goes on its audit trail (action
``resend``; entries written by older versions say ``retry``): resend.lua writes it in
the call that decides; a refusal the reads already tell (``_plan``) is written by
audit.lua, pipelined with the resends.

The task's link fields keep their stored names (``ro``/``ra``/``rby``/``rwhy``, read as
``retryOf``/``retriedAs``/``retriedBy``/``retryReason``), and so do the refusal codes
(``not-retryable``, ``already-retried``): they are data older versions wrote and API
answers clients match on.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from redis.exceptions import ResponseError

from .._audit import require_audit_reason
from .._book import CreateSpec
from .._checks import require_string
from .._console import PublishInfo
from .._kept import KeptMessage, why_omitted
from ..errors import AsyncBookError
from . import _operations as operations
from ._args import utf8
from ._audit import audit_args
from ._console import number_of
from ._creating import create_args, life_and_retention_ms
from ._engine import Engine
from ._merged import MergedPlan, spread, writing
from ._namespace import Namespace
from ._plan import Pipeline, Plan, ScriptCall, Scripts, command, server_time
from ._replies import text_of
from ._script_args import AuditArgs, RecordAuditArgs, ResendArgs
from ._shard import Shard

if TYPE_CHECKING:
    from ._book import RedisBook

__all__ = [
    "BROKER_SETTING",
    "RESENDABLE_STATES",
    "ResendClaim",
    "ResendResult",
    "RetryResult",
    "claim_book_resends",
    "claim_resends",
    "claim_sharded_resends",
]

BROKER_SETTING = "ASYNCBOOK_BROKER_URL"
"""Where ``asyncbook serve`` and ``asyncbook resend`` read the broker URL (or ``--broker``)."""

RESENDABLE_STATES = ("failed", "expired", "cancelled")
"""The states a task can be resent from."""
_AUDITED_REFUSALS = frozenset(
    {"not-retryable", "already-retried", "no-message", "message-too-large"}
)
"""The refusals recorded: the book's answers for a task that exists (cancel's rule: not
an unknown task, nor a call that failed, such as a damaged kept message)."""
_TASK_FIELDS = ("st", "exp", "max", "hbt", "rdl", "c", "ra", "q")
_DEFAULT_TTL_MS = 3_600_000
"""The new task's life when the original's creation time is not known."""


class ResendClaim(NamedTuple):
    """One task's resend as the book decided it: created (``new_id``, the message to
    publish and the new deadline) or refused (``code``, ``text``, and ``detail``: the
    task's state for ``not-retryable``, the new task's id for ``already-retried``)."""

    task_id: str
    new_id: str | None = None
    message: KeptMessage | None = None
    deadline_ms: int | float | None = None
    code: str | None = None
    detail: str | None = None
    text: str | None = None
    """Why it was refused, in words."""


def _refused(task_id: str, code: str, detail: str | None = None) -> ResendClaim:
    texts = {
        "not-found": f"no task {task_id!r}",
        "not-retryable": f"task {task_id!r} is {detail}: only a failed, expired or "
        "cancelled task can be resent",
        "already-retried": f"task {task_id!r} was resent already, as {detail!r}",
        "no-message": f"task {task_id!r} has no kept message to send again: turn "
        "asyncbook_keep_messages on in the Celery app's configuration (Celery's "
        "result_extended keeps arguments, not the message as published)",
    }
    return ResendClaim(task_id, code=code, detail=detail, text=texts.get(code, code))


class _Read(NamedTuple):
    task_id: str
    fields: list[Any]
    long: list[Any]
    message: Any


def _read(shard: Shard, task_ids: Sequence[str]) -> Plan[list[_Read]]:
    """Each task's fields, its args and kwargs and its kept message: one round trip."""
    k = shard.keys
    reads = []
    for task_id in task_ids:
        reads.append(command("hmget", k.task(task_id), *_TASK_FIELDS))
        reads.append(command("hmget", k.info(task_id), "a", "k"))
        reads.append(command("get", k.message(task_id)))
    replies = yield Pipeline(reads)
    return [_Read(task_id, *replies[3 * i : 3 * i + 3]) for i, task_id in enumerate(task_ids)]


def fresh_id(_original: str) -> str:
    """A resend's new id: a random UUID, as Celery names a task."""
    return str(uuid.uuid4())


def _plan(
    read: _Read, now_ms: int, new_id_for: Callable[[str], str]
) -> ResendClaim | tuple[CreateSpec, KeptMessage]:
    """The new task's create and the message to send, or the refusal the read tells."""
    state, expires, attempts, heartbeat, stall, created, retried_as, queue = read.fields
    if state is None:
        return _refused(read.task_id, "not-found")
    if text_of(state) not in RESENDABLE_STATES:
        return _refused(read.task_id, "not-retryable", text_of(state))
    if retried_as is not None:
        return _refused(read.task_id, "already-retried", text_of(retried_as))
    if read.message is None:
        return _refused(read.task_id, "no-message")
    omitted = why_omitted(read.message)
    if omitted is not None:
        code, why = omitted
        return ResendClaim(read.task_id, code=code, text=why)
    try:
        message = KeptMessage.from_json(read.message)
    except AsyncBookError as error:
        return ResendClaim(read.task_id, code=error.code, text=error.message)
    # The same life as the original's: its deadline less its creation.
    ttl = (number_of(expires) or 0) - (number_of(created) or 0) if created is not None else 0
    args, kwargs = (None if raw is None else text_of(raw) for raw in read.long)
    new_id = new_id_for(read.task_id)
    info = PublishInfo(
        name=message.name,
        args=args,
        kwargs=kwargs,
        queue=None if queue is None else text_of(queue),
        root_id=new_id,  # a fresh task is its own root
    )
    spec = CreateSpec(
        id=new_id,
        now_ms=now_ms,
        ttl_ms=ttl if ttl > 0 else _DEFAULT_TTL_MS,
        max_attempts=int(text_of(attempts)),
        heartbeat_timeout_ms=None if heartbeat is None else int(text_of(heartbeat)),
        retry_on_stall=stall is not None and text_of(stall) == "1",
        info=info,
    )
    return spec, message


def _refusal_entry(shard: Shard, claim: ResendClaim, audit: AuditArgs) -> ScriptCall:
    """audit.lua's call recording ``claim``'s refusal on its task's trail."""
    k = shard.keys
    keys = [k.task(claim.task_id), k.task_audit(claim.task_id), k.audit_log]
    retried_as = claim.detail if claim.code == "already-retried" else None
    entry = RecordAuditArgs(claim.task_id, audit, str(claim.code), retried_as or "")
    return ScriptCall("audit", keys, entry.argv())


def _answer(made: ResendClaim, reply: Any) -> ResendClaim:
    """resend.lua's answer: ``made`` when it created the new task, else its refusal."""
    if isinstance(reply, ResponseError):
        raise reply  # the server refused the call (OOM, READONLY): nothing was written
    status = text_of(reply[0])
    if status == "created":
        return made
    if status == "refused":
        return _refused(made.task_id, text_of(reply[1]), text_of(reply[2]) or None)
    return ResendClaim(made.task_id, code="damaged", text=f"the resend's create answered {status}")


def claim_resends(
    engine: Engine,
    task_ids: Sequence[str],
    *,
    actor: str | None = None,
    reason: str | None = None,
    new_id_for: Callable[[str], str] = fresh_id,
) -> list[ResendClaim]:
    """Create the resend of each task (one per task, ever), linked both ways, with who
    asked (``actor``) and why (``reason``); a task that cannot be resent is refused in
    its place. Three round trips to Redis (the clock, the reads, the creates), whatever
    the number of tasks. ``new_id_for(task id)`` names each new task (a random UUID)."""
    ids, audit = _checked(engine.layout, task_ids, actor, reason)
    return engine.run(resends(engine.layout, ids, audit, new_id_for))


def _checked(
    shard: Shard, task_ids: Sequence[str], actor: str | None, reason: str | None
) -> tuple[list[str], AuditArgs]:
    """The ids, and the audit slots of a resend asked by ``actor`` for ``reason``, all
    checked before anything is written."""
    ids = [utf8(require_string(task_id, "taskId"), "taskId") for task_id in task_ids]
    kept_reason = require_audit_reason(reason)
    if actor is None:  # not said: kept nowhere, and no audit entry
        return ids, AuditArgs("", "resend", kept_reason is not None, kept_reason or "", 0, 0)
    return ids, audit_args(shard, actor, "resend", kept_reason)


def resends(
    shard: Shard,
    ids: Sequence[str],
    audit: AuditArgs,
    new_id_for: Callable[[str], str] = fresh_id,
) -> Plan[list[ResendClaim]]:
    """``claim_resends`` of checked ids on one shard, as a plan: the clock, the reads in
    one pipeline, then resend.lua for each task and audit.lua for each audited refusal,
    sent together (``Scripts``: the drivers run a script Redis lost again, and wait for
    replicas)."""
    if not ids:
        return []
    yield from operations.before_write(shard)
    now = yield from server_time()
    claims: list[ResendClaim] = []
    created: list[int] = []  # the positions of the claims resend.lua decides
    scripts: list[ScriptCall] = []
    refusals: list[ScriptCall] = []
    k = shard.keys
    for read in (yield from _read(shard, ids)):
        planned = _plan(read, now, new_id_for)
        if isinstance(planned, ResendClaim):
            if audit.actor != "" and planned.code in _AUDITED_REFUSALS:
                refusals.append(_refusal_entry(shard, planned, audit))
            claims.append(planned)
            continue
        spec, message = planned
        task, keys, create = create_args(shard, spec)
        create = dataclasses.replace(create, message_keep_ms=life_and_retention_ms(shard, spec))
        keys += [k.task(read.task_id), k.message(read.task_id)]
        keys += [k.task_audit(read.task_id), k.audit_log]
        scripts.append(ScriptCall("resend", keys, ResendArgs(create, read.task_id, audit).argv()))
        created.append(len(claims))
        claims.append(ResendClaim(read.task_id, spec.id, message, task.expires_at_ms))
    replies = yield Scripts([*scripts, *refusals])
    for reply in replies[len(scripts) :]:
        if isinstance(reply, ResponseError):
            raise reply  # a refusal's entry the server did not take (OOM, READONLY)
    for at, reply in zip(created, replies[: len(scripts)], strict=True):
        claims[at] = _answer(claims[at], reply)
    return claims


def claim_book_resends(
    book: RedisBook,
    task_ids: Sequence[str],
    *,
    actor: str | None = None,
    reason: str | None = None,
) -> list[ResendClaim]:
    """``claim_resends`` on ``book``, one shard or many (what a publisher calls): each
    task in its shard, its new task beside it (the shards at once); the answers in the
    order of ``task_ids``. Bad input (an id, the actor, the reason) is refused before any
    shard is written."""
    ids, audit = _checked(book.ns.first, task_ids, actor, reason)
    return book.driver.run(_namespace_resends(book.ns, ids, audit))


def _namespace_resends(
    ns: Namespace, ids: list[str], audit: AuditArgs
) -> MergedPlan[list[ResendClaim]]:
    if not ids:
        return []
    yield from writing(ns)

    def make(shard: Shard, ats: list[int]) -> Plan[list[ResendClaim]]:
        # New ids of the originals' shard (a random UUID drawn again until it hashes
        # there: S draws on average), so the decision stays one resend.lua call on one
        # hash tag: two resends of a task at once still create one new task.
        def new_id(original: str) -> str:
            while True:
                candidate = fresh_id(original)
                if ns.count == 1 or ns.index_of(candidate) == shard.keys.shard_index:
                    return candidate

        return resends(shard, [ids[at] for at in ats], audit, new_id)

    return (yield from spread(ns.shards, ns.by_shard(ids), make, len(ids)))


@dataclass(frozen=True)
class ResendResult:
    """One task's resend: sent (``retried_as``, ``code`` None) or refused (``code``,
    ``message``; ``retried_as`` names the new task when there is one: ``already-retried``,
    or ``not-sent``, whose new task was cancelled)."""

    task_id: str
    retried_as: str | None = None
    code: str | None = None
    message: str | None = None

    def wire(self) -> dict[str, Any]:
        """The JSON the API answers with (camelCase)."""
        names = ("taskId", "retriedAs", "code", "message")
        return dict(zip(names, dataclasses.astuple(self), strict=True))


# The old names, kept until 0.3.0 (docs/resend.md).
RETRYABLE_STATES = RESENDABLE_STATES
RetryClaim = ResendClaim
RetryResult = ResendResult
claim_retries = claim_resends
claim_sharded_resends = claim_book_resends
"""The name of a sharded book's resends before one namespace plan ran every layout."""
