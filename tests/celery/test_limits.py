"""Concurrency limits in one process (docs/limits.md): the options and their errors, and
a threaded worker on a MemoryBook that runs a name-wide limit of 1 one at a time, every
task once, in the order they waited."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from asyncbook import AsyncBookError, MemoryBook
from asyncbook.celery import OverLimit, TrackTasks, tracked
from asyncbook.celery._concurrency import limit_option

from ..support.celery import memory_app, threaded_worker, unique, wait_for


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": "2"}, "limit"),
        ({"limit": True}, "limit"),
        ({"limit": 2, "concurrency_key": "tenant"}, "concurrency_key"),
        ({"concurrency_key": lambda **kwargs: "k"}, "limit"),
    ],
)
def test_bad_options_are_refused_naming_their_field(options: dict[str, Any], field: str) -> None:
    app = memory_app("limits-options")

    @app.task(name=unique("job"), shared=False)
    def job() -> None: ...

    for make in (lambda: tracked(job, **options), lambda: TrackTasks("job", **options)):
        with pytest.raises(AsyncBookError) as refused:
            make()
        assert refused.value.field == field
    setattr(job, "limit", options.get("limit"))  # noqa: B010 (no such attribute to mypy)
    setattr(job, "concurrency_key", options.get("concurrency_key"))  # noqa: B010
    with pytest.raises(AsyncBookError) as refused:
        limit_option(job)
    assert refused.value.field == field


def test_a_bad_limit_set_on_a_tracked_task_refuses_the_worker_naming_it() -> None:
    """Set on the task itself (not through ``tracked``), a bad ``limit`` stops the worker
    at its start, as a bad ``one_run`` does, instead of running the task unlimited."""
    from types import SimpleNamespace

    from asyncbook.celery import SettingsError, install, uninstall

    app = memory_app("limits-start")

    @app.task(name=unique("job"), shared=False, tracked=True, ttl=60, limit="2")
    def job() -> None: ...

    integration = install(app, MemoryBook())
    try:
        assert integration.limits is not None
        with pytest.raises(SettingsError, match=r"limit of task .* must be an integer"):
            integration.limits.on_worker_init(sender=SimpleNamespace(app=app))
        integration.limits.on_worker_init(sender=SimpleNamespace(app=memory_app("other")))
    finally:
        uninstall(app)


def test_an_over_limit_delivery_is_an_ignore_naming_its_key() -> None:
    assert str(OverLimit("t-1", "key:acme runs 2")) == "task t-1 waits for a slot: key:acme runs 2"


def test_a_name_wide_limit_runs_one_at_a_time_and_each_once() -> None:
    app = memory_app("limits")
    book = MemoryBook()
    lock, running, most, order = threading.Lock(), [0], [0], []

    @app.task(name=unique("job"), shared=False, tracked=True, limit=1, heartbeat_timeout=60)
    def job(n: int) -> int:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            order.append(n)
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        return n

    ids = [unique("job") for _ in range(6)]
    with threaded_worker(app, book):
        for n, task_id in enumerate(ids):
            job.apply_async((n,), task_id=task_id)
        wait_for(lambda: all(_ended(book, task_id) for task_id in ids), timeout=20)
    assert most[0] == 1
    assert sorted(order) == list(range(6))  # each once
    tasks = [book.get(task_id) for task_id in ids]
    assert all(task is not None and task.attempts == 1 for task in tasks)


def _ended(book: MemoryBook, task_id: str) -> bool:
    task = book.get(task_id)
    return task is not None and task.state.value == "succeeded"


def test_a_line_whose_slots_died_moves_on_without_another_call_of_its_key() -> None:
    app = memory_app("limits-dead", asyncbook_heartbeat_interval=0.1)
    book = MemoryBook()
    name = unique("job")

    @app.task(name=name, shared=False, tracked=True, limit=1, heartbeat_timeout=60)
    def job() -> str:
        return "ran"

    task_id = unique("job")
    with threaded_worker(app, book):
        # A worker took the one slot and died before its start: no heartbeat, no release.
        assert book.take_slot(f"name:{name}", "dead", 1, lease_ms=1500).granted
        job.apply_async(task_id=task_id)
        wait_for(lambda: book.take_slot(f"name:{name}", "dead", 1, lease_ms=1).waiting)
        wait_for(lambda: _ended(book, task_id), timeout=10)  # its poke freed the slot
    task = book.get(task_id)
    assert task is not None
    assert task.attempts == 1


class _Counted(MemoryBook):
    """A MemoryBook that notes the slot and claim calls a worker makes."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def take_slot(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append("take_slot")
        return super().take_slot(*args, **kwargs)

    def claim_run(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append("claim_run")
        return super().claim_run(*args, **kwargs)

    def claim_run_in_slot(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append("claim_run_in_slot")
        return super().claim_run_in_slot(*args, **kwargs)

    def release_slot(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append("release_slot")
        return super().release_slot(*args, **kwargs)


def test_a_limited_start_takes_its_slot_in_its_claim_one_call_before_its_body() -> None:
    app = memory_app("limits-one-call")
    book = _Counted()
    seen: list[list[str]] = []

    @app.task(name=unique("job"), shared=False, tracked=True, limit=1, heartbeat_timeout=60)
    def job() -> str:
        seen.append(list(book.calls))  # the calls made before the body
        return "ran"

    task_id = unique("job")
    with threaded_worker(app, book):
        job.apply_async(task_id=task_id)
        wait_for(lambda: _ended(book, task_id), timeout=10)
        wait_for(lambda: "release_slot" in book.calls, timeout=10)
    assert seen == [["claim_run_in_slot"]]
    assert book.calls == ["claim_run_in_slot", "release_slot"]
