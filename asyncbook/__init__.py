"""asyncbook: a durable, exact lifecycle in Redis for long-running Celery tasks."""

from ._audit import AuditedBook, AuditEntry
from ._book import ApplyItem, AsyncBook, CreateSpec, EventInput
from ._console import (
    MinuteStats,
    NameTotals,
    PublishInfo,
    SearchPage,
    SearchRow,
    TaskInfo,
    TaskQuery,
    TaskStats,
    WorkerSummary,
)
from ._delivery import DeliveryReport, deliver_notifications, notification_source
from ._fleet import WorkerRecord
from ._health import SweepHealth, sweep_health
from ._machine import apply_async_event, create_async_task, expire_task
from ._memory import MemoryBook
from ._models import (
    TERMINAL_STATES,
    AsyncEvent,
    AsyncState,
    AsyncTask,
    AsyncTransition,
    CallbackResult,
    CancelEvent,
    DeliveryReceipt,
    DeliveryResult,
    ExpireEvent,
    FailEvent,
    GroupNotification,
    GroupSummary,
    HistoryEntry,
    Notification,
    ProgressEvent,
    ResumeMode,
    ResumeResult,
    StartEvent,
    SucceedEvent,
    TaskPage,
    parse_event,
    parse_task,
    to_wire,
)
from ._one_run import Held
from ._output import OutputAppend, OutputChunk, OutputPage
from ._reasons import Reason
from ._sinks import Sink, SinkError, WebhookSink
from ._slots import Slot, SlotBook, SlotRequest, SlotStart
from ._sweep import SweepReport, sweep
from ._version import __version__
from .errors import (
    ArtifactError,
    AsyncBookError,
    BookUnavailableError,
    DamagedRecordError,
    NotReplicatedError,
    UnknownTaskError,
    UnsupportedServerError,
)
from .redis import AsyncRedisBook, RedisBook

__all__ = [
    # models
    "TERMINAL_STATES",
    "AsyncEvent",
    "AsyncState",
    "AsyncTask",
    "AsyncTransition",
    "CallbackResult",
    "CancelEvent",
    "DeliveryReceipt",
    "DeliveryResult",
    "ExpireEvent",
    "FailEvent",
    "GroupNotification",
    "GroupSummary",
    "HistoryEntry",
    "Notification",
    "ProgressEvent",
    "ResumeMode",
    "Reason",
    "ResumeResult",
    "OutputAppend",
    "OutputChunk",
    "OutputPage",
    "StartEvent",
    "SucceedEvent",
    "TaskPage",
    "parse_event",
    "parse_task",
    "to_wire",
    # the operator console
    "MinuteStats",
    "NameTotals",
    "PublishInfo",
    "SearchPage",
    "SearchRow",
    "TaskInfo",
    "TaskQuery",
    "TaskStats",
    "WorkerRecord",
    "WorkerSummary",
    # the audit trail
    "AuditEntry",
    "AuditedBook",
    # one run per task: claim_run's held answer
    "Held",
    # concurrency limits: the book's slots
    "Slot",
    "SlotBook",
    "SlotRequest",
    "SlotStart",
    # the pure machine
    "apply_async_event",
    "create_async_task",
    "expire_task",
    # books
    "ApplyItem",
    "CreateSpec",
    "AsyncBook",
    "EventInput",
    "MemoryBook",
    "RedisBook",
    "AsyncRedisBook",
    # celery integration (install and report_progress are in asyncbook.signals and
    # asyncbook.progress: importing asyncbook does not import Celery)
    "DeliveryReport",
    "Sink",
    "SinkError",
    "SweepHealth",
    "SweepReport",
    "WebhookSink",
    "deliver_notifications",
    "notification_source",
    "sweep",
    "sweep_health",
    # errors
    "ArtifactError",
    "AsyncBookError",
    "BookUnavailableError",
    "NotReplicatedError",
    "DamagedRecordError",
    "UnknownTaskError",
    "UnsupportedServerError",
    # version
    "__version__",
]
