"""The integration's settings, read from a Celery app's ``conf`` under ``asyncbook_``.

The integration reads them once, when it first needs them (the first tracked publish or
execution, or the first sweep or delivery), not at ``install``: an app configured after
``install`` (``config_from_object`` included) is read as configured. A worker and beat
read them as they start, and refuse to start when one does not read (``_startup``).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from importlib.util import find_spec
from typing import Any

from .._console import DEFAULT_REDACT, INFO_LIMIT
from .._kept import KEPT_MESSAGE_LIMIT
from .._webhook_signing import WebhookSecret, webhook_secrets
from ..errors import invalid
from ..redis._connection import DEFAULT_REDIS_URL
from ..redis._shards import MAX_SHARDS
from ._artifacts import ArtifactSettings

__all__ = ["KNOWN_SETTINGS", "Settings", "duration_ms", "unknown_settings"]

KNOWN_SETTINGS = tuple(
    f"asyncbook_{name}"
    for name in (
        "redis_url", "namespace", "shards", "default_ttl", "flush_delay", "defer_creates",
        "retry_for", "result_ref", "sinks", "group_sinks", "webhook_secret", "sweep_batch",
        "consumer_group", "redelivery_idle", "queue", "worker_sweep", "heartbeat_interval",
        "heartbeat_timeout", "record_info", "record_args", "info_limit", "redact",
        "keep_messages", "keep_message_limit", "wait_replicas", "wait_timeout_ms", "exit_wait",
        "keep_redacted_messages", "one_run", "artifacts", "artifact_options",
        "artifact_threshold", "artifact_url_expiry", "artifact_sweep", "tracing",
    )
)  # fmt: skip
"""Every ``asyncbook_*`` setting the integration reads."""


def unknown_settings(extra: Mapping[str, Any]) -> str:
    """The unknown settings (``Settings.extra``), each with the known one it is closest
    to: ``asyncbook_flush_dealy (did you mean asyncbook_flush_delay?)``."""
    named = []
    for name in sorted(f"asyncbook_{key}" for key in extra):
        close = difflib.get_close_matches(name, KNOWN_SETTINGS, n=1, cutoff=0.75)
        named.append(f"{name} (did you mean {close[0]}?)" if close else name)
    return ", ".join(named)


def duration_ms(value: Any, name: str) -> int:
    """A ``timedelta`` or a number of seconds, in whole milliseconds (> 0)."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise invalid(f"{name} must be a timedelta or a number of seconds", field=name)
    if not seconds > 0:
        raise invalid(f"{name} must be positive", field=name)
    return max(1, round(seconds * 1000))


def _seconds(value: Any, name: str) -> float:
    return duration_ms(value, name) / 1000


def _switch(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise invalid(f"{name} must be True or False", field=name)
    return value


def _tracing(value: Any) -> bool:
    """``asyncbook_tracing``: on only with opentelemetry-api installed (the ``otel`` extra)."""
    if _switch(value, "asyncbook_tracing") and find_spec("opentelemetry") is None:
        raise invalid(
            "asyncbook_tracing needs opentelemetry-api: pip install 'asyncbook[otel]'",
            field="asyncbook_tracing",
        )
    return bool(value)


def _wait(value: Any, name: str) -> float:
    """A ``timedelta`` or a number of seconds, >= 0 (0: do not wait)."""
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, int | float) and not isinstance(seconds, bool) and seconds == 0:
        return 0.0
    return _seconds(value, name)


def _info_limit(value: Any) -> int:
    if type(value) is not int or value < 16:
        raise invalid(
            "asyncbook_info_limit must be a whole number >= 16", field="asyncbook_info_limit"
        )
    return value


def _message_limit(value: Any) -> int:
    if type(value) is not int or value < 1:
        raise invalid(
            "asyncbook_keep_message_limit must be a whole number of bytes >= 1",
            field="asyncbook_keep_message_limit",
        )
    return value


def _delay(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise invalid(
            "asyncbook_flush_delay must be a number of seconds >= 0", field="asyncbook_flush_delay"
        )
    return float(value)


def _count(value: Any, name: str, minimum: int) -> int:
    if type(value) is not int or value < minimum:
        raise invalid(f"{name} must be a whole number >= {minimum}", field=name)
    return value


def _shards(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SHARDS:
        raise invalid(
            f"asyncbook_shards must be a whole number from 1 to {MAX_SHARDS}",
            field="asyncbook_shards",
        )
    return value


def _names(
    value: Any, field: str = "asyncbook_redact", what: str = "keyword names"
) -> tuple[str, ...]:
    names = (value,) if isinstance(value, str) else value
    if not isinstance(names, list | tuple | set | frozenset) or not all(
        isinstance(name, str) for name in names
    ):
        raise invalid(f"{field} must be a list of {what}", field=field)
    return tuple(names)


@dataclass(frozen=True)
class Settings:
    """What the integration reads from ``app.conf`` (each setting is ``asyncbook_<name>``)."""

    redis_url: str = DEFAULT_REDIS_URL
    """The book's Redis; defaults to the broker URL when the broker is Redis."""
    namespace: str = "asyncbook"
    """Prefix of every key the book writes."""
    shards: int = 1
    """How many shards (hash tags) the namespace is split into, to spread it over a Redis
    Cluster's masters; fixed at the namespace's first use, the same in every process."""
    default_ttl_ms: int = 3_600_000
    """Deadline of a tracked task without its own ``ttl`` (``asyncbook_default_ttl``)."""
    flush_delay: float = 0.02
    """How long (s) a start or progress event may wait to ride with the next write."""
    defer_creates: bool = True
    """Publishing a tracked task queues its create for a background thread (pipelined
    batches, sent at once when idle) instead of waiting for it; a RedisBook of one shard
    only."""
    retry_for: float = 10.0
    """How long (s) a write waits, retried with backoff, while the book is unreachable."""
    exit_wait: float = 2.0
    """How long (s) a publishing process that exits waits for its queued creates (the
    book down: the workers create those tasks from their messages)."""
    result_ref: Any = None
    """``callable(task, task_id, result) -> str`` (or its dotted path) naming the result."""
    sinks: tuple[Any, ...] = ()
    """Notification sinks: callables, dotted paths to callables, or webhook URLs."""
    group_sinks: tuple[Any, ...] = ()
    """Sinks of group notifications (one per declared group whose members all ended)."""
    webhook_secrets: tuple[WebhookSecret, ...] = ()
    """What the webhook URLs of both sink settings are signed with
    (``asyncbook_webhook_secret``: one ``whsec_`` secret, or a list while rotating)."""
    sweep_batch: int = 1000
    """Tasks expired per round trip by the sweep."""
    consumer_group: str = "asyncbook"
    """Consumer group of the notification delivery task."""
    redelivery_idle_ms: int = 60_000
    """How long a notification one consumer took and never acknowledged waits before
    another consumer of ``asyncbook.deliver`` takes it (``asyncbook_redelivery_idle``)."""
    queue: str = "asyncbook"
    """The queue ``asyncbook.sweep`` and ``asyncbook.deliver`` are routed to."""
    worker_sweep: bool = True
    """Every worker (and beat) of the app sweeps and delivers in a thread of its main
    process, one per namespace at a time; False leaves it to ``asyncbook.sweep`` and
    ``asyncbook.deliver`` run from beat through the ``asyncbook_queue``."""
    heartbeat_interval: float = 10.0
    """How often (s) a worker process sends one heartbeat for all its running tasks."""
    heartbeat_timeout_ms: int = 60_000
    """How long a running attempt may stay silent before the sweep fails it as stalled
    (``asyncbook_heartbeat_timeout``; a task's own ``heartbeat_timeout`` option wins)."""
    one_run: bool = True
    """One run per task: a delivery of a tracked task whose running attempt is alive is
    not run but postponed to after that attempt's stall time (docs/one-run.md); a task's
    own ``one_run`` option wins. Tasks without a heartbeat timeout are never held."""
    tracing: bool = False
    """Lifecycle traces: each tracked task's publish, queue wait and attempts become
    OpenTelemetry spans in its publisher's trace (the ``otel`` extra; docs/tracing.md)."""
    record_info: bool = True
    """Record each tracked task's info for the console (name, queue, worker, times...)."""
    record_args: bool = True
    """Record args and kwargs (as bounded reprs) with the info."""
    info_limit: int = INFO_LIMIT
    """Length (characters) args, kwargs and other info texts are truncated to."""
    redact: tuple[str, ...] = DEFAULT_REDACT
    """Keyword arguments masked in the recorded kwargs, by name (case-insensitive)."""
    keep_messages: bool = False
    """Keep each tracked task's message as published (never shown), so that it can be
    resent: sent again, exactly, as a new task."""
    keep_message_limit: int = KEPT_MESSAGE_LIMIT
    """The largest message kept, in bytes; a larger one is not kept (a resend says why)."""
    keep_redacted_messages: tuple[str, ...] = ()
    """Names of the tasks whose message is kept even when a keyword argument of it is one
    ``redact`` masks (then readable in the book's Redis); any other such message is not
    kept (a resend says why)."""
    wait_replicas: int = 0
    """Every write of the book waits (``WAIT``) for this many replicas before it counts
    as done; 0 sends no ``WAIT`` (docs/redis.md, "Waiting for a replica")."""
    wait_timeout_ms: int = 1000
    """How long (ms) a write waits for them; past it the write is sent again."""
    artifacts: ArtifactSettings = field(default_factory=ArtifactSettings)
    """Where results are stored by reference, from what size (docs/artifacts.md)."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Every other ``asyncbook_*`` setting: unknown, so the integration warns (a typo?)."""

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any]) -> Settings:
        """Settings from a Celery ``app.conf`` (or any mapping)."""
        values = {
            key[len("asyncbook_") :]: conf[key]
            for key in list(conf.keys())
            if isinstance(key, str) and key.startswith("asyncbook_")
        }
        broker = conf.get("broker_url") or ""
        default_url = broker if str(broker).startswith(("redis://", "rediss://")) else None
        sinks = values.pop("sinks", ())
        group_sinks = values.pop("group_sinks", ())
        known = {
            "redis_url": str(values.pop("redis_url", None) or default_url or DEFAULT_REDIS_URL),
            "namespace": str(values.pop("namespace", cls.namespace)),
            "shards": _shards(values.pop("shards", cls.shards)),
            "default_ttl_ms": duration_ms(
                values.pop("default_ttl", timedelta(hours=1)), "asyncbook_default_ttl"
            ),
            "flush_delay": _delay(values.pop("flush_delay", cls.flush_delay)),
            "defer_creates": bool(values.pop("defer_creates", cls.defer_creates)),
            "retry_for": _seconds(values.pop("retry_for", cls.retry_for), "asyncbook_retry_for"),
            "exit_wait": _wait(values.pop("exit_wait", cls.exit_wait), "asyncbook_exit_wait"),
            "result_ref": values.pop("result_ref", None),
            "sinks": tuple(sinks) if isinstance(sinks, list | tuple) else (sinks,),
            "group_sinks": (
                tuple(group_sinks) if isinstance(group_sinks, list | tuple) else (group_sinks,)
            ),
            "webhook_secrets": webhook_secrets(
                values.pop("webhook_secret", None), "asyncbook_webhook_secret"
            ),
            "sweep_batch": _count(
                values.pop("sweep_batch", cls.sweep_batch), "asyncbook_sweep_batch", 1
            ),
            "consumer_group": str(values.pop("consumer_group", cls.consumer_group)),
            "redelivery_idle_ms": duration_ms(
                values.pop("redelivery_idle", timedelta(minutes=1)), "asyncbook_redelivery_idle"
            ),
            "queue": str(values.pop("queue", None) or cls.queue),
            "worker_sweep": bool(values.pop("worker_sweep", cls.worker_sweep)),
            "heartbeat_interval": _seconds(
                values.pop("heartbeat_interval", cls.heartbeat_interval),
                "asyncbook_heartbeat_interval",
            ),
            "heartbeat_timeout_ms": duration_ms(
                values.pop("heartbeat_timeout", timedelta(minutes=1)), "asyncbook_heartbeat_timeout"
            ),
            "one_run": _switch(values.pop("one_run", cls.one_run), "asyncbook_one_run"),
            "tracing": _tracing(values.pop("tracing", cls.tracing)),
            "record_info": bool(values.pop("record_info", cls.record_info)),
            "record_args": bool(values.pop("record_args", cls.record_args)),
            "info_limit": _info_limit(values.pop("info_limit", cls.info_limit)),
            "redact": _names(values.pop("redact", cls.redact)),
            "keep_messages": bool(values.pop("keep_messages", cls.keep_messages)),
            "keep_message_limit": _message_limit(
                values.pop("keep_message_limit", cls.keep_message_limit)
            ),
            "keep_redacted_messages": _names(
                values.pop("keep_redacted_messages", cls.keep_redacted_messages),
                "asyncbook_keep_redacted_messages",
                "task names",
            ),
            "wait_replicas": _count(
                values.pop("wait_replicas", cls.wait_replicas), "asyncbook_wait_replicas", 0
            ),
            "wait_timeout_ms": _count(
                values.pop("wait_timeout_ms", cls.wait_timeout_ms), "asyncbook_wait_timeout_ms", 1
            ),
            "artifacts": ArtifactSettings.pop(values),
        }
        return cls(**known, extra=values)
