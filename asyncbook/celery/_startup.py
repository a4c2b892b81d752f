"""A bad setting never switches tracking off in silence.

Where the app starts, the ``asyncbook_*`` settings are read and checked: a worker or beat
whose settings do not read refuses to start (``SettingsError``, naming the setting), and a
publish of a tracked task raises it (``SettingsGate``, the router ``install`` puts first
in ``task_routes``: a router's error reaches the caller of ``apply_async``, a signal
handler's does not). Options of a tracked task that look misspelt (``tll=``,
``max_retires=``) are named in a warning, once per task.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from celery import Celery, Task, signals
from celery.local import Proxy

from .._sinks import GroupSink, Sink
from ..errors import AsyncBookError, invalid
from ._result_ref import ResultRef
from ._settings import Settings
from ._state import Handler, Lazy
from ._tracking import TRACK_OPTIONS, is_tracked

__all__ = ["SettingsError", "SettingsGate", "StartChecks", "misspelt_options"]

logger = logging.getLogger("asyncbook.celery")

_TASK_ATTRIBUTES = frozenset(dir(Task))


class SettingsError(SystemExit):
    """A worker or beat refuses to start: a setting of the app does not read. Its one
    argument, the text printed, names the setting (``asyncbook: asyncbook_webhook_secret
    must start with whsec_ (fix asyncbook_webhook_secret)``). A ``SystemExit``: Celery's
    signals would only log an ``Exception``, and the worker would start."""

    __module__ = "asyncbook.celery"

    @classmethod
    def of(cls, error: AsyncBookError) -> SettingsError:
        """The refusal for the settings' ``error``."""
        return cls(f"asyncbook: {error.message} (fix {error.field or 'the asyncbook settings'})")


def misspelt_options(task: Task[Any, Any]) -> list[tuple[str, str]]:
    """``(given, meant)`` for each option of ``task``'s class that is no Celery task
    attribute and looks like one of the tracking options (``tll`` for ``ttl``)."""
    if isinstance(task, Proxy):  # @app.task's answer before the app is finalized
        task = task._get_current_object()
    found = []
    for name in vars(type(task)):
        if name.startswith("_") or name in _TASK_ATTRIBUTES or name in TRACK_OPTIONS:
            continue
        close = difflib.get_close_matches(name, TRACK_OPTIONS, n=1, cutoff=0.6)
        if close:
            found.append((name, close[0]))
    return found


class SettingsGate:
    """First in ``task_routes``: routes nothing, and refuses to publish a tracked task
    while the app's settings do not read."""

    def __init__(self, check: Callable[[Any], None]) -> None:
        self._check = check

    def __call__(
        self, name: str, args: Any, kwargs: Any, options: Any, task: Any = None, **_: Any
    ) -> None:
        if isinstance(task, Task):
            self._check(task)


@dataclass(eq=False)
class StartChecks:
    """The settings, read where the app starts; misspelt task options, warned about."""

    app: Celery
    settings: Lazy[Settings]
    result_ref: Lazy[ResultRef]
    sinks: Lazy[tuple[Sink, ...]]
    group_sinks: Lazy[tuple[GroupSink, ...]]
    _warned: set[str] = field(default_factory=set, init=False)

    def __post_init__(self) -> None:
        self.gate = SettingsGate(self.check_publish)

    def check_publish(self, task: Task[Any, Any]) -> None:
        """A task is published: a tracked one only when the settings read (else their
        ``AsyncBookError``, naming the setting, reaches the caller)."""
        if is_tracked(task):
            self.settings.get()  # read, and checked, once
            self.warn_options(task)

    def warn_options(self, task: Task[Any, Any]) -> None:
        """Name the options of tracked ``task`` that look misspelt (once per task)."""
        name = str(task.name)
        if name in self._warned:
            return
        self._warned.add(name)
        for given, meant in misspelt_options(task):
            logger.warning(
                "asyncbook: task %s has option %r, which asyncbook does not know: did you "
                "mean %r? (it is ignored)",
                name,
                given,
                meant,
            )

    def check_start(self) -> None:
        """A worker or beat starts: refuse when a setting does not read; warn about the
        tracked tasks' misspelt options and the sinks that do not load."""
        try:
            self.settings.get()
        except AsyncBookError as error:
            raise SettingsError.of(error) from error
        try:
            self.result_ref.get()
        except Exception as error:
            refused = invalid(
                f"asyncbook_result_ref does not load: {error}", field="asyncbook_result_ref"
            )
            raise SettingsError.of(refused) from error
        sinks: tuple[tuple[str, Lazy[Any]], ...] = (
            ("asyncbook_sinks", self.sinks),
            ("asyncbook_group_sinks", self.group_sinks),
        )
        for setting, lazy in sinks:
            try:
                lazy.get()
            except Exception as error:  # delivery stays off: notifications wait
                logger.warning(
                    "asyncbook: %s does not load (%s): notifications wait in the outbox "
                    "until it does; tracking goes on",
                    setting,
                    error,
                )
        for task in list(self.app.tasks.values()):
            if is_tracked(task):
                self.warn_options(task)

    def on_worker_init(self, sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is self.app:
            self.check_start()

    def on_beat_init(self, sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is self.app:
            self.check_start()

    def handlers(self) -> list[Handler]:
        """Its signals: a worker is made, beat starts (before the others' handlers)."""
        return [(signals.worker_init, self.on_worker_init), (signals.beat_init, self.on_beat_init)]
