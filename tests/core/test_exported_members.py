"""The public surface: what each package exports, pinned (a change here is an API change)."""

from __future__ import annotations

import importlib
import types

import pytest

EXPORTS = {
    "asyncbook": [
        "ApplyItem",
        "ArtifactError",
        "AsyncBook",
        "AsyncBookError",
        "AsyncEvent",
        "AsyncRedisBook",
        "AsyncState",
        "AsyncTask",
        "AsyncTransition",
        "AuditEntry",
        "AuditedBook",
        "BookUnavailableError",
        "CallbackResult",
        "CancelEvent",
        "CreateSpec",
        "DamagedRecordError",
        "DeliveryReceipt",
        "DeliveryReport",
        "DeliveryResult",
        "EventInput",
        "ExpireEvent",
        "FailEvent",
        "GroupNotification",
        "GroupSummary",
        "Held",
        "HistoryEntry",
        "MemoryBook",
        "MinuteStats",
        "NameTotals",
        "NotReplicatedError",
        "Notification",
        "OutputAppend",
        "OutputChunk",
        "OutputPage",
        "ProgressEvent",
        "PublishInfo",
        "Reason",
        "RedisBook",
        "ResumeMode",
        "ResumeResult",
        "SearchPage",
        "SearchRow",
        "Sink",
        "SinkError",
        "Slot",
        "SlotBook",
        "SlotRequest",
        "SlotStart",
        "StartEvent",
        "SucceedEvent",
        "SweepHealth",
        "SweepReport",
        "TERMINAL_STATES",
        "TaskInfo",
        "TaskPage",
        "TaskQuery",
        "TaskStats",
        "UnknownTaskError",
        "UnsupportedServerError",
        "WebhookSink",
        "WorkerRecord",
        "WorkerSummary",
        "__version__",
        "apply_async_event",
        "create_async_task",
        "deliver_notifications",
        "expire_task",
        "notification_source",
        "parse_event",
        "parse_task",
        "sweep",
        "sweep_health",
        "to_wire",
    ],
    "asyncbook.redis": [
        "AsyncRedisBook",
        "AsyncShardedRedisBook",
        "BROKER_SETTING",
        "BookScript",
        "Change",
        "DEFAULT_REDIS_URL",
        "EventOutcome",
        "HomeRule",
        "KeySchema",
        "MAX_SHARDS",
        "RESENDABLE_STATES",
        "RETRYABLE_STATES",
        "RedisBook",
        "RedisUnavailableError",
        "ResendClaim",
        "ResendResult",
        "RetryClaim",
        "RetryResult",
        "ScriptedEvents",
        "ShardedRedisBook",
        "changes",
        "claim_book_resends",
        "claim_resends",
        "claim_retries",
        "connect",
        "connect_async",
        "escape_id",
        "follow_changes",
        "follow_task",
        "parse_change",
        "prefix_home",
        "retry_policy",
        "stored_shards",
    ],
    "asyncbook.celery": [
        "AmqpBroker",
        "AsyncBookBackend",
        "AsyncBookSentinelBackend",
        "CREATED_HEADER",
        "DEADLINE_HEADER",
        "DuplicateRun",
        "Integration",
        "OverLimit",
        "RedisBroker",
        "Resender",
        "Retrier",
        "Settings",
        "SettingsError",
        "TaskCancelled",
        "TaskEndedInBook",
        "TaskExpired",
        "TrackTasks",
        "apply_group",
        "async_book_of",
        "book_of",
        "cancel",
        "celery_home",
        "default_result_ref",
        "install",
        "installed",
        "last_cursor",
        "report_output",
        "report_progress",
        "tracked",
        "uninstall",
    ],
    "asyncbook.web": [
        "AccessRules",
        "BackgroundServer",
        "BookChangeFeed",
        "Change",
        "ChangeFeed",
        "LocalChangeFeed",
        "Resending",
        "create_app",
        "feed_for",
        "serve",
    ],
    "asyncbook.cli": ["cli", "main"],
    "asyncbook.artifacts": [
        "ArtifactStore",
        "Download",
        "LocalStore",
        "OrphanReport",
        "S3Store",
        "Stored",
        "aread",
        "checked",
        "digest_of",
        "download_for",
        "fits",
        "key_for",
        "open_store",
        "read",
        "sweep_orphans",
        "task_of_key",
    ],
}


@pytest.mark.parametrize("name", sorted(EXPORTS))
def test_exported_members(name: str) -> None:
    module = importlib.import_module(name)
    assert sorted(module.__all__) == EXPORTS[name]
    public = {
        member
        for member in dir(module)
        if not member.startswith("_") and not isinstance(getattr(module, member), types.ModuleType)
    }
    assert public == set(module.__all__) - {"__version__"}, "exported but not in __all__"
    for member in module.__all__:
        assert hasattr(module, member), member


def test_private_modules_are_marked() -> None:
    """Beside the packages' __init__, only errors.py and the deprecated aliases are public."""
    from pathlib import Path

    root = Path(importlib.import_module("asyncbook").__file__ or "").parent
    public = sorted(
        str(path.relative_to(root)) for path in root.rglob("*.py") if not path.name.startswith("_")
    )
    assert public == ["errors.py", "progress.py", "signals.py"]
