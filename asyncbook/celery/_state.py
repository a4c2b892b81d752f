"""What the integration's parts share for one Celery app: ``Shared``.

``install(app)`` builds one ``Shared`` and hands it to each part (publishing, execution,
outcomes, controls, the worker's upkeep). It holds the app, its book, the settings and
what is built from them when first needed (not at ``install``: an app may be configured
after ``install``, and a sink may be defined further down the module that calls it),
and this process's running executions (``Execution``, by task id and by task name).
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from celery import Celery

from .._book import AsyncBook
from .._delivery import NotificationSource
from .._dotted import import_path
from .._models import AsyncTask
from .._sinks import GroupSink, Sink, resolve_sink
from ..errors import AsyncBookError
from ..redis import RedisBook, retry_policy
from ._beat import BeatRouter
from ._creates import Creates
from ._info import InfoPolicy
from ._lifecycle import CancelledRing, CancelWatch, Heartbeats
from ._recorder import Recorder
from ._result_ref import ResultRef, default_result_ref
from ._retrying import attempted, retrying
from ._settings import Settings, unknown_settings
from ._tracking import celery_home
from ._upkeep import Upkeep
from ._urls import sentinel_book_url

__all__ = ["REMEMBERED", "Execution", "Handler", "Once", "ProcessState", "Shared"]

logger = logging.getLogger("asyncbook.celery")

REMEMBERED = 4096
"""Failures (and cancels) a process remembers, per task id, before the oldest go."""

_T = TypeVar("_T")

Handler = tuple[Any, Callable[..., None]]
"""A Celery signal (or the app's ``on_after_configure``) and the handler to connect to it."""


class Once(Generic[_T]):
    """A value built by ``build`` when first asked for, by one thread (the others wait)."""

    def __init__(self, build: Callable[[], _T]) -> None:
        self._build = build
        self._box: list[_T] = []
        self._pid = os.getpid()
        self._lock = threading.RLock()

    def get(self) -> _T:
        """The value, built now if it was not yet."""
        if not self._box:
            if os.getpid() != self._pid:  # a forked child may inherit a held lock
                self._pid, self._lock = os.getpid(), threading.RLock()
            with self._lock:
                if not self._box:
                    self._box.append(self._build())
        return self._box[0]

    def built(self) -> _T | None:
        """The value if it was built, else None (nothing is built)."""
        return self._box[0] if self._box else None

    def set(self, value: _T) -> None:
        """Take ``value`` as built."""
        self._box[:] = [value]


@dataclass(frozen=True)
class Execution:
    """One execution of a tracked task running in this process (prerun to postrun)."""

    task_id: str
    name: str
    """The task's name: ``report_progress`` from another thread finds it by its task."""
    retries: int
    nonce: str
    """In its start and progress callback ids: a redelivered execution (after a stall)
    starts a new attempt instead of repeating the old one."""
    deadline_ms: int | None
    """Its task's deadline, when the message says."""
    create: Callable[[], AsyncTask | None]
    """Creates its task from its message (when the publisher's create did not land)."""


@dataclass
class ProcessState:
    """What one process knows; a forked pool child starts afresh (``Shared.process``)."""

    pid: int = field(default_factory=os.getpid)
    lock: threading.Lock = field(default_factory=threading.Lock)
    executions: dict[str, Execution] = field(default_factory=dict)
    """The executions running here, by task id."""
    running: dict[str, list[Execution]] = field(default_factory=dict)
    """The same, by task name."""
    failures: OrderedDict[str, int | str] = field(default_factory=OrderedDict)
    """The executions whose failure this process recorded (task id -> retries)."""
    cancelled: OrderedDict[str, str | None] = field(default_factory=OrderedDict)
    """Tasks the book answered "cancelled" for (their next report_progress raises)."""
    heartbeats: Heartbeats | None = None
    cancel_watch: CancelWatch | None = None


class Shared:
    """One app's integration state, shared by its parts."""

    def __init__(
        self, app: Celery, book: AsyncBook | None = None, settings: Settings | None = None
    ) -> None:
        self.app = app
        self.held_book = book
        """The book given to ``install``, or the one built from the settings, once built."""
        self.settings_once = Once(self._read_settings)
        if settings is not None:
            self.settings_once.set(settings)
        self.recorder_once: Once[Recorder] = Once(self._no_recorder)
        """Replaced by the integration (the recorder calls back into its parts)."""
        self.creates_once: Once[Creates | None] = Once(self._deferred_creates)
        self.info_policy_once = Once(self._info_policy)
        self.result_ref_once = Once(self._result_ref)
        self.sinks_once: Once[tuple[Sink, ...]] = Once(
            lambda: tuple(
                resolve_sink(
                    spec,
                    secrets=self.settings.webhook_secrets,
                    namespace=self.settings.namespace,
                )
                for spec in self.settings.sinks
            )
        )
        self.group_sinks_once: Once[tuple[GroupSink, ...]] = Once(self._group_sinks)
        self.sources: tuple[NotificationSource, NotificationSource] | None = None
        this = weakref.ref(self)  # the router stays in app.conf: it holds no integration
        self.router = BeatRouter(lambda: None if (s := this()) is None else s.settings.queue)
        self.schedule: dict[str, dict[str, Any]] = {}
        """The beat entries ``install`` added (removed again by ``disconnect``)."""
        self.upkeep: Upkeep | None = None
        self.ring: CancelledRing | None = None
        """Shared with the pool processes forked after worker_init: not reset in them."""
        self._process = ProcessState()

    @property
    def process(self) -> ProcessState:
        """This process's state (a forked child's own, not its parent's)."""
        if os.getpid() != self._process.pid:
            self._process = ProcessState()
        return self._process

    # -- what is read when first needed ------------------------------------------------

    def _read_settings(self) -> Settings:
        settings = Settings.from_conf(self.app.conf)
        if settings.extra:
            unknown = unknown_settings(settings.extra)
            logger.warning("asyncbook: unknown settings ignored: %s", unknown)
        given = self.held_book
        shards = getattr(given, "shards", 1)
        if given is not None and "asyncbook_shards" in self.app.conf and settings.shards != shards:
            logger.warning(
                "asyncbook: asyncbook_shards = %d ignored: install(app, book) was given a "
                "book of %d shard(s)",
                settings.shards,
                shards,
            )
        return settings

    @property
    def settings(self) -> Settings:
        """The ``asyncbook_*`` settings of ``app.conf``, read once, when first needed."""
        return self.settings_once.get()

    @property
    def recorder(self) -> Recorder:
        """Writes this process's events to the book (built on first use)."""
        return self.recorder_once.get()

    @property
    def book(self) -> AsyncBook:
        """The book events go to (built from ``asyncbook_redis_url`` on first use)."""
        return self.recorder.book

    @property
    def attempt_timeout(self) -> float:
        """How long one call to the book may block (connect, then read)."""
        return max(0.05, min(2.0, self.settings.retry_for / 4))

    @staticmethod
    def _no_recorder() -> Recorder:
        raise RuntimeError("the integration sets Shared.recorder_once")

    def _info_policy(self) -> InfoPolicy:
        settings = self.settings
        return InfoPolicy(
            record_info=settings.record_info,
            record_args=settings.record_args,
            limit=settings.info_limit,
            redact=settings.redact,
        )

    def _result_ref(self) -> ResultRef:
        configured = self.settings.result_ref
        if configured is None:
            return default_result_ref
        resolved: ResultRef = import_path(configured) if isinstance(configured, str) else configured
        return resolved

    def _group_sinks(self) -> tuple[GroupSink, ...]:
        # A group sink is resolved as a sink is: the same callables, URLs and paths.
        secrets = self.settings.webhook_secrets
        resolved: list[Any] = [
            resolve_sink(spec, secrets=secrets, namespace=self.settings.namespace)
            for spec in self.settings.group_sinks
        ]
        return tuple(resolved)

    def _deferred_creates(self) -> Creates | None:
        if not self.settings.defer_creates or self.book.create_sender() is None:
            return None
        settings = self.settings
        return Creates(
            lambda: self.book, retry_for=settings.retry_for, exit_wait=settings.exit_wait
        )

    def book_url(self) -> str:
        """``asyncbook_redis_url``; unset, with asyncbook's result backend, the backend's
        Redis (so its one write holds both the book's events and Celery's meta)."""
        conf = self.app.conf
        backend = conf.get("result_backend")
        if not conf.get("asyncbook_redis_url") and isinstance(backend, str):
            scheme, plus, rest = backend.partition("+")
            if plus and scheme == "asyncbook" and rest.startswith(("redis://", "rediss://")):
                return rest
            options = conf.get("result_backend_transport_options") or {}
            master = options.get("master_name") if isinstance(options, dict) else None
            if plus and scheme == "asyncbook" and rest.startswith("sentinel://") and master:
                return sentinel_book_url(rest, str(master))
        return self.settings.redis_url

    def make_book(self) -> AsyncBook:
        """The given book, else a ``RedisBook`` on ``book_url`` (built once)."""
        if self.held_book is None:
            # One call blocks at most attempt_timeout (connect, then read): the recorder
            # and ``retrying`` do the retrying, within asyncbook_retry_for.
            timeout = self.attempt_timeout
            self.held_book = RedisBook.from_url(
                self.book_url(),
                namespace=self.settings.namespace,
                shards=self.settings.shards,
                home_of=celery_home,
                socket_timeout=timeout,
                socket_connect_timeout=timeout,
                retry=retry_policy(0),
                wait_replicas=self.settings.wait_replicas,
                wait_timeout_ms=self.settings.wait_timeout_ms,
            )
        return self.held_book

    @property
    def heartbeats(self) -> Heartbeats:
        """This process's running tracked executions, beating every interval."""
        process = self.process
        if process.heartbeats is None:
            process.heartbeats = Heartbeats(lambda: self.book, self.settings.heartbeat_interval)
        return process.heartbeats

    def retried(
        self, call: Callable[[], _T], task_id: str, doing: str, done: str, *, once: bool = False
    ) -> _T | None:
        """``call()`` for ``task_id``, retried while the book is unreachable (within
        ``retry_for``; tried ``once``: not at all); None, logged, if it never answered or
        refused."""
        try:
            if once:
                return attempted(call, f"{doing} task {task_id}")
            return retrying(
                call,
                self.settings.retry_for,
                f"{doing} task {task_id}",
                attempt_timeout=2 * self.attempt_timeout,
            )
        except AsyncBookError as error:
            logger.error("asyncbook: task %s could not be %s: %s", task_id, done, error)
            return None

    def remember(self, known: OrderedDict[str, Any], task_id: str, value: Any) -> None:
        """``known[task_id] = value``, the oldest forgotten past ``REMEMBERED`` (under the
        process lock)."""
        known[task_id] = value
        while len(known) > REMEMBERED:
            known.popitem(last=False)
