"""asyncbook: a durable, exact lifecycle in Redis for long-running Celery tasks."""

from ._version import __version__
from .book import ApplyItem, AsyncBook, EventInput
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
    # errors
    "AsyncBookError",
    "UnknownTaskError",
    # version
    "__version__",
]
