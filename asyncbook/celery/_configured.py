"""What is made from an app's ``asyncbook_*`` settings: the settings themselves (read once,
warning of unknown ones), the book, the recorder, the info policy, the ``asyncbook_result_ref``
callable, the sinks; and the bound on a call to the book and its retries.

Each is a function of what it uses; ``Integration`` calls them on first use (``Lazy``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from celery import Celery

from .._book import AsyncBook
from .._dotted import import_path
from .._sinks import GroupSink, Sink, resolve_sink
from ..errors import AsyncBookError
from ..redis import RedisBook, retry_policy
from ._info import InfoPolicy
from ._recorder import Recorder
from ._result_ref import ResultRef, default_result_ref
from ._retrying import attempted, retrying
from ._settings import Settings, unknown_settings
from ._state import Running
from ._tracking import celery_home
from ._urls import sentinel_book_url

__all__ = [
    "attempt_timeout",
    "book_url",
    "build_book",
    "group_sinks",
    "info_policy",
    "read_settings",
    "recorder",
    "result_ref",
    "retried",
    "sinks",
]

logger = logging.getLogger("asyncbook.celery")

_T = TypeVar("_T")


def read_settings(app: Celery, given: AsyncBook | None) -> Settings:
    """The ``asyncbook_*`` settings of ``app.conf``; unknown ones, and a shard count the
    ``given`` book contradicts, are warned of."""
    settings = Settings.from_conf(app.conf)
    if settings.extra:
        logger.warning("asyncbook: unknown settings ignored: %s", unknown_settings(settings.extra))
    shards = getattr(given, "shards", 1)
    if given is not None and "asyncbook_shards" in app.conf and settings.shards != shards:
        logger.warning(
            "asyncbook: asyncbook_shards = %d ignored: install(app, book) was given a "
            "book of %d shard(s)",
            settings.shards,
            shards,
        )
    return settings


def attempt_timeout(settings: Settings) -> float:
    """How long one call to the book may block (connect, then read)."""
    return max(0.05, min(2.0, settings.retry_for / 4))


def retried(
    settings: Settings,
    call: Callable[[], _T],
    task_id: str,
    doing: str,
    done: str,
    *,
    once: bool = False,
) -> _T | None:
    """``call()`` for ``task_id``, retried while the book is unreachable (within
    ``retry_for``; tried ``once``: not at all); None, logged, if it never answered or
    refused."""
    try:
        if once:
            return attempted(call, f"{doing} task {task_id}")
        return retrying(
            call,
            settings.retry_for,
            f"{doing} task {task_id}",
            attempt_timeout=2 * attempt_timeout(settings),
        )
    except AsyncBookError as error:
        logger.error("asyncbook: task %s could not be %s: %s", task_id, done, error)
        return None


def book_url(app: Celery, settings: Settings) -> str:
    """``asyncbook_redis_url``; unset, with asyncbook's result backend, the backend's
    Redis (so its one write holds both the book's events and Celery's meta)."""
    conf = app.conf
    backend = conf.get("result_backend")
    if not conf.get("asyncbook_redis_url") and isinstance(backend, str):
        scheme, plus, rest = backend.partition("+")
        if plus and scheme == "asyncbook" and rest.startswith(("redis://", "rediss://")):
            return rest
        options = conf.get("result_backend_transport_options") or {}
        master = options.get("master_name") if isinstance(options, dict) else None
        if plus and scheme == "asyncbook" and rest.startswith("sentinel://") and master:
            return sentinel_book_url(rest, str(master))
    return settings.redis_url


def build_book(app: Celery, settings: Settings) -> AsyncBook:
    """A ``RedisBook`` on ``book_url``, for an ``install`` given no book."""
    # One call blocks at most attempt_timeout (connect, then read): the recorder and
    # ``retrying`` do the retrying, within asyncbook_retry_for.
    timeout = attempt_timeout(settings)
    return RedisBook.from_url(
        book_url(app, settings),
        namespace=settings.namespace,
        shards=settings.shards,
        home_of=celery_home,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=retry_policy(0),
        wait_replicas=settings.wait_replicas,
        wait_timeout_ms=settings.wait_timeout_ms,
    )


def recorder(settings: Settings, book: Callable[[], AsyncBook], running: Running) -> Recorder:
    """The writer of this process's events: what the book answers goes to ``running``
    (a cancel), and so does the question how to create a task the book does not hold."""
    return Recorder(
        book,
        flush_delay=settings.flush_delay,
        retry_for=settings.retry_for,
        on_answer=running.note_answer,
        creator_of=running.creator_of,
    )


def info_policy(settings: Settings) -> InfoPolicy:
    """What a publish records for the console (``asyncbook_record_info`` ...)."""
    return InfoPolicy(
        record_info=settings.record_info,
        record_args=settings.record_args,
        limit=settings.info_limit,
        redact=settings.redact,
    )


def result_ref(settings: Settings) -> ResultRef:
    """``asyncbook_result_ref`` (a dotted path imported), else ``default_result_ref``."""
    configured = settings.result_ref
    if configured is None:
        return default_result_ref
    resolved: ResultRef = import_path(configured) if isinstance(configured, str) else configured
    return resolved


def sinks(settings: Settings) -> tuple[Sink, ...]:
    """``asyncbook_sinks``, resolved (dotted paths imported)."""
    return tuple(_resolved(settings, settings.sinks))


def group_sinks(settings: Settings) -> tuple[GroupSink, ...]:
    """``asyncbook_group_sinks``, resolved as sinks are (the same callables, URLs, paths)."""
    return tuple(_resolved(settings, settings.group_sinks))


def _resolved(settings: Settings, specs: tuple[Any, ...]) -> list[Any]:
    secrets, namespace = settings.webhook_secrets, settings.namespace
    return [resolve_sink(spec, secrets=secrets, namespace=namespace) for spec in specs]
