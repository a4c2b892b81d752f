"""asyncbook: a durable, exact lifecycle in Redis for long-running Celery tasks."""

from ._version import __version__
from .book import ApplyItem, AsyncBook, EventInput
from .delivery import DeliveryReport, deliver_notifications, notification_source
from .errors import AsyncBookError, UnknownTaskError
from .machine import apply_async_event, create_async_task, expire_task
from .memory import MemoryBook
from .models import (
    TERMINAL_STATES,
    AsyncEvent,
    AsyncState,
    AsyncTask,
    AsyncTransition,
    CallbackResult,
    DeliveryReceipt,
    DeliveryResult,
    ExpireEvent,
    FailEvent,
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
from .redis_book import RedisBook
from .sinks import Sink, SinkError, WebhookSink
from .sweep import SweepReport, sweep

__all__ = [
    # models
    "TERMINAL_STATES",
    "AsyncEvent",
    "AsyncState",
    "AsyncTask",
    "AsyncTransition",
    "CallbackResult",
    "DeliveryReceipt",
    "DeliveryResult",
    "ExpireEvent",
    "FailEvent",
    "HistoryEntry",
    "Notification",
    "ProgressEvent",
    "ResumeMode",
    "ResumeResult",
    "StartEvent",
    "SucceedEvent",
    "TaskPage",
    "parse_event",
    "parse_task",
    "to_wire",
    # the pure machine
    "apply_async_event",
    "create_async_task",
    "expire_task",
    # books
    "ApplyItem",
    "AsyncBook",
    "EventInput",
    "MemoryBook",
    "RedisBook",
    # celery integration (install and report_progress are in asyncbook.signals and
    # asyncbook.progress: importing asyncbook does not import Celery)
    "DeliveryReport",
    "Sink",
    "SinkError",
    "SweepReport",
    "WebhookSink",
    "deliver_notifications",
    "notification_source",
    "sweep",
    # errors
    "AsyncBookError",
    "UnknownTaskError",
    # version
    "__version__",
]
