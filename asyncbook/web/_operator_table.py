"""The routes of what operators do and what records it: resend (a task, or a search's
tasks; ``/retry`` and ``/api/retry`` are its deprecated names, answered alike until
0.3.0) and the audit trail's reads; ``route_table`` mounts them over a book that keeps
task info."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ._audit_api import AuditApi
from ._cancel import CANCEL_BODY_LIMIT
from ._paths import TASKS
from ._resend import (
    ResendApi,
    ResendBatch,
    ResendOutcome,
    ResendQuery,
    ResendRefusal,
    ResendRequest,
)
from ._routes import Operation, Page, json_answer
from ._schemas import AuditList, AuditQuery, Error, TaskIdPath

__all__ = ["RETIRED_IN", "audit_operations", "resend_operations"]

Table = list[Operation | Page]


_AUDIT_HELP = (
    "Who cancelled (or resent) what, when and why, and the book's answer; newest first. "
    "The read role may read it (docs/access.md)."
)


def audit_operations(api: AuditApi) -> Table:
    """The audit trail's reads (only over a book that keeps one): a task's, and every
    task's; the same query and answers."""
    task_ids: dict[str, Any] = {"path_params": TaskIdPath, "raw": TASKS}
    return [
        Operation.at(
            route,
            read,
            f"{whose} audit entries, newest first",
            {
                200: json_answer(AuditList, entries),
                400: json_answer(Error, "A bad `since` or `limit`"),
            },
            description=_AUDIT_HELP,
            query=AuditQuery,
            **ids,
        )
        for route, read, whose, entries, ids in (
            (
                "GET /api/tasks/{id}/audit",
                api.task_audit,
                "A task's",
                "Its entries (none for a task never changed by hand)",
                task_ids,
            ),
            ("GET /api/audit", api.audit, "Every task's", "The entries", {}),
        )
    ]


RETIRED_IN = "0.3.0"
"""The release without the routes' old names (``/retry``, ``/api/retry``)."""
_RESEND_HELP = (
    "Sends the task's kept message again (`asyncbook_keep_messages`) as a new task, "
    "linked both ways (`retryOf` / `retriedAs` in the tasks' info); once: a second resend "
    "answers 409 `already-retried` naming the first. Needs the operator role (the "
    "operator token, or a trusted proxy's operator); a browser request from another site "
    "is refused (403). Recorded in the audit trail (action `resend`) with who asked."
)
_BULK_RESEND_HELP = (
    "Resends the tasks a search finds (the parameters of `/api/search`; `state` failed, "
    "expired or cancelled, failed by default; at most 1000 a call, `nextAfter` continues). "
    "Each task's outcome is in `results`. Token and same-site rules as a single resend."
)


def _old_named(operation: Operation) -> Operation:
    """``operation`` under its deprecated old name (``.../retry`` for ``.../resend``)."""
    return replace(
        operation,
        path=operation.path.replace("/resend", "/retry"),
        description=f"Deprecated: the old name of `{operation.path}`, answered exactly as it "
        f"until {RETIRED_IN}, which removes it.",
        deprecated=True,
    )


def resend_operations(resend: ResendApi) -> Table:
    """Resend: a task, or a search's tasks, sent again (only over a book that keeps info),
    under its names and, deprecated, its old names (``.../retry``)."""
    common = {
        403: json_answer(
            Error, "Another site's request (`cross-site`) or no operator role (`forbidden`)"
        ),
        413: json_answer(Error, f"A body larger than {CANCEL_BODY_LIMIT} bytes"),
        415: json_answer(Error, "A body that is not sent as JSON"),
    }
    one = {
        200: json_answer(ResendOutcome, "Sent again: `retriedAs` is the new task"),
        400: json_answer(Error, "A bad reason (field `reason`) or body (field `body`)"),
        404: json_answer(ResendRefusal, "No such task; code `not-found`"),
        409: json_answer(
            ResendRefusal,
            "Not resent: `not-retryable` (its state), `already-retried` "
            "(`retriedAs`), `no-message` or `message-too-large` (the setting named)",
        ),
        503: json_answer(
            ResendRefusal,
            "No broker (`no-broker`), or the broker did not take the message "
            "(`not-sent`: the new task was cancelled)",
        ),
        **common,
    }
    many = {
        200: json_answer(ResendBatch, "One outcome per task found"),
        400: json_answer(Error, "A bad parameter or body; `field` names it"),
        503: json_answer(Error, "No broker (`no-broker`)"),
        **common,
    }
    table: Table = [
        Operation.at(
            "POST /api/tasks/{id}/resend",
            resend.resend_task,
            "Run a failed, expired or cancelled task again, as a new task",
            one,
            description=_RESEND_HELP,
            body=ResendRequest,
            path_params=TaskIdPath,
            raw=TASKS,
        ),
        Operation.at(
            "POST /api/resend",
            resend.resend_search,
            "Run the tasks a search finds again (failed by default)",
            many,
            description=_BULK_RESEND_HELP,
            query=ResendQuery,
            body=ResendRequest,
        ),
    ]
    return table + [
        _old_named(operation) for operation in table if isinstance(operation, Operation)
    ]
