"""The sweep and delivery nobody has to schedule: beat's entries from ``install``, the
threads of a worker's main process, their lease, and the warning while the sweep stops."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery, signals
from celery.beat import Service

from asyncbook import MemoryBook, RedisBook
from asyncbook.celery import Integration, install, uninstall
from asyncbook.celery._upkeep import Every, Upkeep

from ..support.celery import CELERY_URL, wait_for


@pytest.fixture
def app() -> Iterator[Celery]:
    app = Celery("upkeep", broker="memory://", set_as_current=False)
    yield app
    uninstall(app)


def test_install_puts_sweep_and_delivery_on_beats_schedule(app: Celery) -> None:
    install(app, MemoryBook())
    schedule = app.conf.beat_schedule
    assert {entry["task"] for entry in schedule.values()} == {
        "asyncbook.sweep",
        "asyncbook.deliver",
    }
    assert schedule["asyncbook-sweep"]["schedule"] == 1.0
    uninstall(app)
    assert app.conf.beat_schedule == {}


def test_an_entry_of_the_users_for_the_same_task_wins() -> None:
    app = Celery("upkeep-own", broker="memory://", set_as_current=False)
    mine = {"task": "asyncbook.sweep", "schedule": 5.0}
    try:
        install(app, MemoryBook())  # before the configuration, as the demo's app does
        app.conf.update(beat_schedule={"my-sweep": mine, "other": {"task": "x", "schedule": 9}})
        app.loader.import_default_modules()
        schedule = app.conf.beat_schedule
        assert schedule["my-sweep"] == mine
        assert "asyncbook-sweep" not in schedule
        assert schedule["asyncbook-deliver"]["task"] == "asyncbook.deliver"
        assert schedule["other"] == {"task": "x", "schedule": 9}
    finally:
        uninstall(app)


def test_configured_after_install_gets_the_entries() -> None:
    app = Celery("upkeep-late", set_as_current=False)
    try:
        install(app, MemoryBook())
        app.config_from_object({"broker_url": "memory://"})
        assert set(app.conf.beat_schedule) == {"asyncbook-sweep", "asyncbook-deliver"}
    finally:
        uninstall(app)


def test_beat_adds_entries_its_schedule_lost(app: Celery, tmp_path: Any) -> None:
    install(app, MemoryBook())
    app.conf.beat_schedule = {"mine": {"task": "asyncbook.deliver", "schedule": 3.0}}
    service = Service(app, schedule_filename=str(tmp_path / "beat"))
    signals.beat_init.send(sender=service)  # as beat sends it when it starts
    tasks = {name: entry.task for name, entry in service.scheduler.schedule.items()}
    assert tasks["asyncbook-sweep"] == "asyncbook.sweep"
    assert tasks["mine"] == "asyncbook.deliver"
    assert "asyncbook-deliver" not in tasks
    service.scheduler.close()


def test_every_keeps_its_cadence_and_survives_a_failure(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[float] = []

    def action() -> None:
        calls.append(time.monotonic())
        if len(calls) == 2:
            raise ConnectionError("gone")

    every = Every("asyncbook-test", 0.05, action)
    with caplog.at_level(logging.WARNING, "asyncbook.celery"):
        every.start()
        wait_for(lambda: len(calls) >= 5, 5)
        every.stop()
        every.join(1)
    assert "asyncbook-test failed (tried again): ConnectionError('gone')" in caplog.text
    # On its schedule: never ahead of it (a late round is not made up with a burst: the
    # next is due one interval after the late one's due time, so a gap after a late round
    # may be short on a loaded machine), and a failure does not stop it.
    ahead = [at - calls[0] - 0.05 * index for index, at in enumerate(calls)]
    assert all(gap > -0.01 for gap in ahead), ahead
    assert all(b - a < 1.0 for a, b in itertools.pairwise(calls)), calls


def _integration(app: Celery, book: Any) -> Integration:
    return install(app, book)


def test_one_process_per_namespace_sweeps_at_a_time(app: Celery, namespace: str) -> None:
    book = RedisBook.from_url(CELERY_URL, namespace=namespace)  # the namespace fixture's db
    integration = _integration(app, book)
    first = Upkeep(integration, "w1@host", interval=0.1, warn_interval=60)
    second = Upkeep(integration, "w2@host", interval=0.1, warn_interval=60)
    second.owner = "w2@host:other-pid"  # another process, same namespace
    assert first.lease_ms == 300
    assert book.claim_sweep(first.owner, first.lease_ms)
    assert book.claim_sweep(first.owner, first.lease_ms)  # its holder renews it
    assert not book.claim_sweep(second.owner, second.lease_ms)
    try:
        first.start()
        second.start()
        time.sleep(1.0)
        assert 7 <= first.sweeps <= 12, first.sweeps
        assert second.sweeps == 0
        first.stop()  # the holder goes: the other takes over once the lease lapses
        wait_for(lambda: second.sweeps >= 3, 3)
    finally:
        first.stop()
        second.stop()
    assert book.last_sweep_ms() is not None
    book.client.delete(*book.client.keys(f"{{{namespace}}}*"))


def test_the_warning_comes_while_the_sweep_stopped(
    app: Celery, caplog: pytest.LogCaptureFixture
) -> None:
    book = MemoryBook()
    integration = _integration(app, book)
    book.create(id="late", now_ms=book.now_ms() - 60_000, ttl_ms=1_000, max_attempts=1)
    upkeep = Upkeep(integration, "w@host", sweep=False, warn_interval=0.05)
    with caplog.at_level(logging.WARNING, "asyncbook.celery"):
        upkeep.start()
        wait_for(lambda: caplog.text.count("the expiry sweep has stopped") >= 2, 5)
        upkeep.stop()
    assert "1 task(s) past their deadline and no sweep ever ran" in caplog.text
    assert book.get("late").state == "queued"  # type: ignore[union-attr]
    caplog.clear()
    swept = Upkeep(integration, "w@host", warn_interval=0.05)  # sweeps itself: no warning
    swept.start()
    wait_for(lambda: book.get("late").state == "expired", 5)  # type: ignore[union-attr]
    time.sleep(0.2)
    swept.stop()
    assert "the expiry sweep has stopped" not in caplog.text


class _Worker:
    """What Celery's worker_shutdown names as its sender: a worker of ``app``."""

    def __init__(self, app: Celery) -> None:
        self.app = app


def test_another_apps_worker_stopping_leaves_this_apps_upkeep_running(app: Celery) -> None:
    """A worker's shutdown acts on its own app's integration only: another app's in the
    same process keeps its threads and its buffer (a stop that waited for another app's
    book, down, outlasted Celery's test worker's shutdown timeout, issue 31)."""
    other = Celery("upkeep-other", broker="memory://", set_as_current=False)
    ours = install(app, MemoryBook())
    theirs = install(other, MemoryBook())
    try:
        ours.service.start_upkeep("ours@host")
        signals.worker_shutdown.send(sender=_Worker(other))
        assert ours.service.upkeep is not None  # another app's worker stopped
        signals.worker_shutdown.send(sender=_Worker(app))
        assert ours.service.upkeep is None  # its own worker stopped
    finally:
        ours.service.stop_upkeep()
        theirs.service.stop_upkeep()
        uninstall(other)
