"""Concurrency limits across workers: a tracked task with ``limit`` (and, to bound each
key apart, ``concurrency_key``) runs only while its key has a free slot in the book
(``asyncbook._slots``; docs/limits.md).

At the task's start (``task_prerun``) its run's claim (``_one_run``) takes a slot in
the same script call (``claim_run_in_slot``), so its heartbeats keep the slot; a start
the claim refuses (held, ended) takes none. Over the limit, the delivery is not run
(``before_start`` raises ``OverLimit``, an ``Ignore``): its message, as ``_handback``
sends it again, waits in the key's line in the book, and its record is unchanged. When an attempt
ends (``task_postrun``) its slot is freed, and the book gives it to the line's head,
whose message this worker sends: waiting tasks run in their order, as slots free, with
no polling. A worker that dies frees its slots when their heartbeats lapse, at the
key's next take or release; while a key has waiting tasks, the processes that saw them
wait also free its lapsed slots once every heartbeat interval (``poke``), so a line
whose slots all died moves on though no other call of the key comes.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from celery import Celery, Task, signals

from .._book import AsyncBook
from .._slots import Slot, SlotBook, SlotRequest, SlotStart
from ..errors import AsyncBookError, invalid
from ._configured import retried
from ._handback import resend, resend_json
from ._one_run import DuplicateRun, skip
from ._settings import Settings
from ._startup import SettingsError
from ._state import Handler, Lazy
from ._tracking import is_tracked

__all__ = ["Limits", "OverLimit", "limit_option"]

logger = logging.getLogger("asyncbook.celery")

POKE = "asyncbook:poke"
"""The task id of a poke's release (no task holds a slot by it)."""

KeyOf = Callable[..., Any]
"""A task's ``concurrency_key``: its args and kwargs -> the key (a str)."""


class OverLimit(DuplicateRun):
    """Raised before the body of a delivery whose key has no free slot: Celery
    acknowledges its message, which waits in the book for a slot."""

    def __str__(self) -> str:
        return f"task {self.task_id} waits for a slot: {self.reason}"


def limit_option(task: object) -> tuple[KeyOf | None, int] | None:
    """The task's ``(concurrency_key, limit)``, or None without a ``limit`` (a bad value
    names its field)."""
    name = getattr(task, "name", "?")
    limit = getattr(task, "limit", None)
    key_of = getattr(task, "concurrency_key", None)
    if key_of is not None and not callable(key_of):
        raise invalid(
            f"concurrency_key of task {name} must be a callable of the task's arguments",
            field="concurrency_key",
        )
    if limit is None:
        if key_of is not None:
            raise invalid(f"concurrency_key of task {name} needs a limit", field="limit")
        return None
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise invalid(f"limit of task {name} must be an integer of at least 1", field="limit")
    return key_of, limit


def key_of(task: Task[Any, Any], key: KeyOf | None) -> str:
    """The running delivery's concurrency key: ``key:<its key>``, or ``name:<the task's
    name>`` for a name-wide limit."""
    if key is None:
        return f"name:{task.name}"
    request = task.request
    value = key(*(request.args or ()), **(request.kwargs or {}))
    if not isinstance(value, str) or not value:
        raise invalid(f"concurrency_key of task {task.name} answered {value!r}, not a string")
    return f"key:{value}"


@dataclass(eq=False)
class Limits:
    """This process's slots, taken at starts and freed at ends."""

    app: Celery
    settings: Lazy[Settings]
    book: Lazy[AsyncBook]
    held: dict[str, tuple[str, int, int]] = field(default_factory=dict)
    """Task id -> (key, limit, lease ms) of the slots this process holds."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    watched: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Keys this process saw tasks wait for -> (limit, lease ms): poked every heartbeat
    interval until none waits."""
    poker: tuple[int, threading.Thread] | None = None
    """This process's poking thread (its pid: a forked child starts its own)."""

    def request(
        self, task: Task[Any, Any], task_id: str, timeout_ms: int | None
    ) -> SlotRequest | None:
        """The slot the task's start takes with its claim (``claim_run_in_slot``), or
        None: it runs unlimited (no limit; a bad option, a failing key, no heartbeats or
        a book without slots: logged)."""
        try:
            option = limit_option(task)
        except AsyncBookError as error:  # a bad option: logged naming its field, runs
            logger.error("asyncbook: task %s runs unlimited: %s", task_id, error)
            return None
        if option is None:
            return None
        if timeout_ms is None or not isinstance(self.book.get(), SlotBook):
            logger.error("asyncbook: task %s runs unlimited: no heartbeats or no slots", task_id)
            return None
        try:
            key = key_of(task, option[0])
        except Exception as error:  # the key function failed: run, logged
            logger.error("asyncbook: task %s runs unlimited: %s", task_id, error)
            return None
        return SlotRequest(key, option[1], timeout_ms, resend_json(task))

    def answered(self, task_id: str, slot: SlotRequest, start: SlotStart) -> bool:
        """The claim's answer with its slot: send the messages of those given one; False
        when the task waits in its key's line (``before_start`` raises ``OverLimit``)."""
        key, limit, lease, _ = slot
        if start.slot is not None:
            self.send(start.slot.released)
            self.watch(key, limit, lease, start.slot)
        if start.result is None:
            logger.info("asyncbook: task %s waits for a slot of %s", task_id, key)
            skip(OverLimit(task_id, f"{key} runs {limit}"))
            return False
        return True

    def hold(self, task_id: str, slot: SlotRequest) -> None:
        """The task runs: its slot is freed at its end (``release``; none held by it:
        nothing freed)."""
        with self.lock:
            self.held[task_id] = (slot.key, slot.limit, slot.lease_ms)

    def release(self, task_id: str) -> None:
        """The attempt is over: free its slot, and send the messages of those given one."""
        with self.lock:
            held = self.held.pop(task_id, None)
        book = self.book.get()
        if held is None or not isinstance(book, SlotBook):
            return
        key, limit, lease = held

        def call() -> Slot:
            return book.release_slot(key, task_id, limit, lease_ms=lease)

        slot = retried(self.settings.get(), call, task_id, "freeing the slot of", "freed")
        if slot is not None:
            self.send(slot.released)
            self.watch(key, limit, lease, slot)

    def watch(self, key: str, limit: int, lease: int, slot: Slot) -> None:
        """Poke ``key`` while tasks wait for it (a thread of this process's)."""
        with self.lock:
            if not slot.waiting:
                self.watched.pop(key, None)
                return
            self.watched[key] = (limit, lease)
            poker = self.poker
            if poker is not None and poker[0] == os.getpid() and poker[1].is_alive():
                return
            thread = threading.Thread(target=self.poke, name="asyncbook-slots", daemon=True)
            self.poker = (os.getpid(), thread)
        thread.start()

    def poke(self) -> None:
        """Every heartbeat interval, free the lapsed slots of each watched key (and send
        the messages of those given one); end when no watched key has tasks waiting."""
        interval = self.settings.get().heartbeat_interval
        while True:
            time.sleep(interval)
            with self.lock:
                keys = list(self.watched.items())
                if not keys:
                    self.poker = None
                    return
            book = self.book.get()
            for key, (limit, lease) in keys:
                try:
                    assert isinstance(book, SlotBook)
                    slot = book.release_slot(key, POKE, limit, lease_ms=lease)
                except Exception as error:  # the book is down: poked again next time
                    logger.debug("asyncbook: slots of %s not freed: %r", key, error)
                    continue
                self.send(slot.released)
                if not slot.waiting:
                    with self.lock:
                        self.watched.pop(key, None)

    def send(self, payloads: tuple[str, ...]) -> None:
        """Send the messages of waiting tasks given a slot (a refused one is logged)."""
        for payload in payloads:
            try:
                resend(self.app, payload)
            except Exception as error:
                logger.error("asyncbook: a task given a slot was not sent: %r", error)

    def on_worker_init(self, sender: Any = None, **_: Any) -> None:
        """A worker starts: a tracked task's bad ``limit`` or ``concurrency_key`` set on
        the task itself refuses the start, naming the field (``SettingsError``)."""
        if getattr(sender, "app", None) is not self.app:
            return
        for task in list(self.app.tasks.values()):
            if isinstance(task, Task) and is_tracked(task):
                try:
                    limit_option(task)
                except AsyncBookError as error:
                    raise SettingsError.of(error) from None

    def handlers(self) -> list[Handler]:
        """Its signal: a worker is made (check the tracked tasks' limits)."""
        return [(signals.worker_init, self.on_worker_init)]
