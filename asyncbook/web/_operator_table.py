"""The routes of what operators do and what records it: retry (a task, or a search's
tasks) and the audit trail's reads; ``route_table`` mounts them over a book that keeps
task info."""

from __future__ import annotations

from ._audit_api import AuditApi
from ._cancel import CANCEL_BODY_LIMIT
from ._paths import TASKS
from ._retry import RetryApi, RetryBatch, RetryOutcome, RetryQuery, RetryRefusal, RetryRequest
from ._routes import Operation, Page, json_answer
from ._schemas import AuditList, AuditQuery, Error, TaskIdPath

__all__ = ["audit_operations", "retry_operations"]

Table = list[Operation | Page]


_AUDIT_HELP = (
    "Who cancelled (or retried) what, when and why, and the book's answer; newest first. "
    "The read role may read it (docs/access.md)."
)


def audit_operations(api: AuditApi) -> Table:
    """The audit trail's reads (only over a book that keeps one)."""
    return [
        Operation.at(
            "GET /api/tasks/{id}/audit",
            api.task_audit,
            "A task's audit entries, newest first",
            {
                200: json_answer(AuditList, "Its entries (none for a task never changed by hand)"),
                400: json_answer(Error, "A bad `since` or `limit`"),
            },
            description=_AUDIT_HELP,
            query=AuditQuery,
            path_params=TaskIdPath,
            raw=TASKS,
        ),
        Operation.at(
            "GET /api/audit",
            api.audit,
            "Every task's audit entries, newest first",
            {
                200: json_answer(AuditList, "The entries"),
                400: json_answer(Error, "A bad `since` or `limit`"),
            },
            description=_AUDIT_HELP,
            query=AuditQuery,
        ),
    ]


_RETRY_HELP = (
    "Sends the task's kept message again (`asyncbook_keep_messages`) as a new task, "
    "linked both ways (`retryOf` / `retriedAs` in the tasks' info); once: a second retry "
    "answers 409 `already-retried` naming the first. Needs the operator role (the "
    "operator token, or a trusted proxy's operator); a browser request from another site "
    "is refused (403). Recorded in the audit trail with who asked."
)
_BULK_RETRY_HELP = (
    "Retries the tasks a search finds (the parameters of `/api/search`; `state` failed, "
    "expired or cancelled, failed by default; at most 1000 a call, `nextAfter` continues). "
    "Each task's outcome is in `results`. Token and same-site rules as a single retry."
)


def retry_operations(retry: RetryApi) -> Table:
    """Retry: a task, or a search's tasks, sent again (only over a book that keeps info)."""
    common = {
        403: json_answer(
            Error, "Another site's request (`cross-site`) or no operator role (`forbidden`)"
        ),
        413: json_answer(Error, f"A body larger than {CANCEL_BODY_LIMIT} bytes"),
        415: json_answer(Error, "A body that is not sent as JSON"),
    }
    return [
        Operation.at(
            "POST /api/tasks/{id}/retry",
            retry.retry_task,
            "Run a failed, expired or cancelled task again, as a new task",
            {
                200: json_answer(RetryOutcome, "Sent again: `retriedAs` is the new task"),
                400: json_answer(Error, "A bad reason (field `reason`) or body (field `body`)"),
                404: json_answer(RetryRefusal, "No such task; code `not-found`"),
                409: json_answer(
                    RetryRefusal,
                    "Not retried: `not-retryable` (its state), `already-retried` "
                    "(`retriedAs`), `no-message` or `message-too-large` (the setting named)",
                ),
                503: json_answer(
                    RetryRefusal,
                    "No broker (`no-broker`), or the broker did not take the message "
                    "(`not-sent`: the new task was cancelled)",
                ),
                **common,
            },
            description=_RETRY_HELP,
            body=RetryRequest,
            path_params=TaskIdPath,
            raw=TASKS,
        ),
        Operation.at(
            "POST /api/retry",
            retry.retry_search,
            "Run the tasks a search finds again (failed by default)",
            {
                200: json_answer(RetryBatch, "One outcome per task found"),
                400: json_answer(Error, "A bad parameter or body; `field` names it"),
                503: json_answer(Error, "No broker (`no-broker`)"),
                **common,
            },
            description=_BULK_RETRY_HELP,
            query=RetryQuery,
            body=RetryRequest,
        ),
    ]
