"""A bad setting never switches tracking off in silence: a worker and beat refuse to
start naming it, a publish of a tracked task raises it, a misspelt setting or tracked
task option is named with what it likely meant."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from celery.contrib.testing.worker import start_worker
from celery.utils.serialization import UnpickleableExceptionWrapper

from asyncbook import AsyncBookError, MemoryBook
from asyncbook.celery import SettingsError, install, uninstall
from asyncbook.celery._startup import misspelt_options
from asyncbook.celery._tracking import describe_error

from ..support.books import fakeredis_book
from ..support.celery import memory_app

BAD = {"asyncbook_webhook_secret": "hunter2"}


def test_a_tracked_publish_raises_the_setting_that_does_not_read() -> None:
    app = memory_app("gate", **BAD)

    @app.task(shared=False, tracked=True, ttl=60)
    def tracked_job() -> None: ...

    @app.task(shared=False)
    def plain_job() -> None: ...

    book = fakeredis_book("gate")
    install(app, book)
    try:
        with pytest.raises(AsyncBookError) as raised:
            tracked_job.delay()
        assert raised.value.field == "asyncbook_webhook_secret"
        assert "hunter2" not in str(raised.value)
        plain_job.delay()  # an untracked task is Celery's alone: published
        app.conf.asyncbook_webhook_secret = "whsec_" + "A" * 32  # fixed: published again
        result = tracked_job.delay()
        assert book.get(result.id) is not None
    finally:
        uninstall(app)
    assert not any("SettingsGate" in type(route).__name__ for route in app.conf.task_routes)


def test_an_embedded_worker_refuses_to_start_naming_the_setting() -> None:
    app = memory_app("refuse", **BAD)
    install(app, MemoryBook())
    try:
        with pytest.raises(SettingsError) as raised, start_worker(app, perform_ping_check=False):
            pass
        assert "asyncbook_webhook_secret" in str(raised.value)
        assert isinstance(raised.value, SystemExit)
    finally:
        uninstall(app)


APP = """
from celery import Celery
from asyncbook.celery import install

app = Celery("badsettings", broker="memory://")
app.conf.asyncbook_webhook_secret = "hunter2"
app.conf.beat_schedule_filename = {schedule!r}
install(app)
"""


@pytest.mark.parametrize("program", ["worker", "beat"])
def test_worker_and_beat_refuse_to_start_naming_the_setting(tmp_path: Path, program: str) -> None:
    schedule = str(tmp_path / "schedule")
    (tmp_path / "badsettings.py").write_text(textwrap.dedent(APP.format(schedule=schedule)))
    command = [sys.executable, "-m", "celery", "-A", "badsettings", program, "-l", "info"]
    if program == "worker":
        command += ["--pool=solo", "--without-gossip", "--without-mingle"]
    ran = subprocess.run(
        command, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False
    )
    output = ran.stdout + ran.stderr
    assert ran.returncode != 0, output
    assert "asyncbook_webhook_secret" in output
    assert " ready." not in output


def test_a_misspelt_setting_is_named_with_what_it_likely_meant(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = Celery("typo", broker="memory://", set_as_current=False)
    app.conf.asyncbook_flush_dealy = 1
    app.conf.asyncbook_zzz = 1
    integration = install(app, MemoryBook())
    try:
        with caplog.at_level(logging.WARNING, "asyncbook.celery"):
            integration.settings  # noqa: B018
    finally:
        uninstall(app)
    assert "asyncbook_flush_dealy (did you mean asyncbook_flush_delay?)" in caplog.text
    assert "asyncbook_zzz," not in caplog.text
    assert "asyncbook_zzz (did" not in caplog.text


@pytest.mark.parametrize(
    ("conf", "field"),
    [
        ({"asyncbook_flush_delay": "soon"}, "asyncbook_flush_delay"),
        ({"asyncbook_sweep_batch": 0}, "asyncbook_sweep_batch"),
        ({"asyncbook_result_ref": "no.such:thing"}, "asyncbook_result_ref"),
    ],
)
def test_other_settings_that_do_not_read_refuse_the_start(conf: dict[str, Any], field: str) -> None:
    app = memory_app("refuse", **conf)
    install(app, MemoryBook())
    try:
        with pytest.raises(SettingsError, match=field), start_worker(app, perform_ping_check=False):
            pass
    finally:
        uninstall(app)


def test_misspelt_options_of_a_tracked_task_are_named(caplog: pytest.LogCaptureFixture) -> None:
    app = memory_app("options")

    @app.task(shared=False, tracked=True, tll=5, max_retires=0, colour="blue")
    def job() -> None: ...

    assert sorted(misspelt_options(job)) == [("max_retires", "max_retries"), ("tll", "ttl")]
    book = MemoryBook()
    install(app, book)
    try:
        with caplog.at_level(logging.WARNING, "asyncbook.celery"):
            job.delay()
            job.delay()
    finally:
        uninstall(app)
    assert caplog.text.count("'tll'") == 1  # once per task
    assert "did you mean 'ttl'" in caplog.text
    assert "did you mean 'max_retries'" in caplog.text
    assert "colour" not in caplog.text


class Weird(Exception):  # noqa: N818
    def __init__(self, a: str, b: str) -> None:
        super().__init__(f"{a}/{b}")


def test_an_unpicklable_exception_is_described_as_itself() -> None:
    wrapper = UnpickleableExceptionWrapper.from_exception(Weird("x", "y"))
    assert describe_error(wrapper) == "Weird: x/y"  # from its args, outside the handler
    try:
        raise Weird("x", "y")
    except Weird:
        assert describe_error(wrapper) == "Weird: x/y"  # the one being handled
