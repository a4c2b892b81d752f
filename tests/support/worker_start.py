"""A test worker that does not start fails at once, saying why, instead of hanging.

``celery.contrib.testing.worker.start_worker`` waits for the consumer without a timeout:
a worker thread whose start raised (Celery logs "Unrecoverable error" and stops it) or
blocked leaves the test waiting until pytest-timeout, with no word of the worker's own
stack. ``guard_worker_starts`` makes that wait ``START_TIMEOUT`` seconds, after which the
test fails with the error the worker logged and every thread's stack.

A test worker whose thread outlives its shutdown timeout leaves Celery's process-wide
``should_terminate`` set, and every later test worker of the process stops as it starts:
``terminate_flag_left`` clears it after the test that left it, which fails instead,
showing where the threads were (``thread_stacks``)."""

from __future__ import annotations

import logging
import sys
import threading
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from celery.contrib.testing.worker import TestWorkController
from celery.worker import state as worker_state

__all__ = ["START_TIMEOUT", "guard_worker_starts", "terminate_flag_left", "thread_stacks"]

START_TIMEOUT = 60.0
"""Seconds a test worker has to be ready (Celery's own start takes well under one)."""


class _Critical(logging.Handler):
    """Keeps what Celery's worker logged at CRITICAL (its "Unrecoverable error")."""

    def __init__(self) -> None:
        super().__init__(logging.CRITICAL)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(self.format(record))


def thread_stacks() -> str:
    """Every live thread's stack, named (what a stuck worker is waiting on)."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    return "\n".join(
        f"--- thread {names.get(ident, ident)}\n" + "".join(traceback.format_stack(frame))
        for ident, frame in sys._current_frames().items()
    )


@contextmanager
def guard_worker_starts() -> Iterator[None]:
    """While open, a test worker not ready within ``START_TIMEOUT`` raises, naming why."""
    original = TestWorkController.ensure_started
    critical = _Critical()
    celery_logger = logging.getLogger("celery")

    def ensure_started(self: Any) -> None:
        if self._on_started.wait(START_TIMEOUT):
            return
        logged = "\n".join(critical.records) or "nothing at CRITICAL"
        raise RuntimeError(
            f"the test worker was not ready within {START_TIMEOUT:.0f} s; it logged: "
            f"{logged}\nthreads:\n{thread_stacks()}"
        )

    TestWorkController.ensure_started = ensure_started  # type: ignore[method-assign]
    celery_logger.addHandler(critical)
    try:
        yield
    finally:
        celery_logger.removeHandler(critical)
        TestWorkController.ensure_started = original  # type: ignore[method-assign]


def terminate_flag_left() -> bool:
    """True if a test worker left Celery's ``should_terminate`` set (now cleared)."""
    if worker_state.should_terminate is None:
        return False
    worker_state.should_terminate = None
    return True
