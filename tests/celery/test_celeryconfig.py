"""The top-level ``celeryconfig.py``: the project's worker app (``workers/``) loads it with
``config_from_object("celeryconfig")``; it names the broker, asyncbook as the result
backend and asyncbook settings that all exist, each read from the environment with a
loopback default."""

from __future__ import annotations

import dataclasses
import runpy
from typing import Any

import pytest
from celery import Celery

from asyncbook.celery import AsyncBookBackend
from asyncbook.celery._settings import Settings

from ..support import ROOT

CONFIG = ROOT / "celeryconfig.py"
ENVIRONMENT = [
    "REDIS_URL",
    "ASYNCBOOK_REDIS_URL",
    "ASYNCBOOK_NAMESPACE",
    "ASYNCBOOK_QUEUE",
    "ASYNCBOOK_WEBHOOK_URL",
    "ASYNCBOOK_WEBHOOK_SECRET",
    "ASYNCBOOK_HEARTBEAT_INTERVAL",
    "ASYNCBOOK_HEARTBEAT_TIMEOUT",
    "ASYNCBOOK_SHARDS",
    "ASYNCBOOK_VISIBILITY_TIMEOUT",
    "ASYNCBOOK_WORKER_SWEEP",
]


def loaded(monkeypatch: pytest.MonkeyPatch, **environment: str) -> Celery:
    """An app configured from the file under exactly ``environment``."""
    for name in ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    settings: dict[str, Any] = {
        key: value for key, value in runpy.run_path(str(CONFIG)).items() if key.islower()
    }
    app = Celery("config-test", set_as_current=False)
    app.config_from_object(settings)
    return app


def test_the_worker_app_is_configured_by_celeryconfig() -> None:
    import celeryconfig
    import workers

    # (other tests point workers.app at their own Redis: its source is what is checked)
    assert getattr(workers.app, "_config_source", None) == "celeryconfig"
    app = Celery("config-by-name", set_as_current=False)
    app.config_from_object("celeryconfig")  # as workers/main.py does
    assert app.conf.broker_url == celeryconfig.broker_url
    assert app.conf.result_backend == f"asyncbook+{celeryconfig.redis_url}"
    assert app.conf.asyncbook_namespace == celeryconfig.asyncbook_namespace
    assert "demo.generate" in workers.app.tasks
    assert "workers.tasks.transcribe" in workers.app.tasks


def test_the_defaults_are_a_redis_on_the_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    app = loaded(monkeypatch)
    assert app.conf.broker_url == "redis://127.0.0.1:6379/0"
    assert app.conf.result_backend == "asyncbook+redis://127.0.0.1:6379/0"
    assert isinstance(app.backend, AsyncBookBackend)
    settings = Settings.from_conf(app.conf)
    assert settings.extra == {}  # every asyncbook_* setting it names exists
    assert (settings.redis_url, settings.namespace, settings.queue) == (
        "redis://127.0.0.1:6379/0",
        "asyncbook",
        "asyncbook",
    )
    assert (settings.sinks, settings.webhook_secrets, settings.worker_sweep) == ((), (), True)
    assert settings == dataclasses.replace(
        Settings(),
        redis_url="redis://127.0.0.1:6379/0",
        extra={},
    )  # the rest: asyncbook's defaults, written out
    assert app.conf.task_default_queue == "celery"
    assert app.conf.task_acks_late is True


def test_the_environment_sets_each_value(monkeypatch: pytest.MonkeyPatch) -> None:
    app = loaded(
        monkeypatch,
        REDIS_URL="redis://127.0.0.1:6390/3",
        ASYNCBOOK_REDIS_URL="redis://127.0.0.1:6391/4",
        ASYNCBOOK_NAMESPACE="proj",
        ASYNCBOOK_QUEUE="jobs",
        ASYNCBOOK_WEBHOOK_URL="http://127.0.0.1:9/hook",
        ASYNCBOOK_HEARTBEAT_INTERVAL="2",
        ASYNCBOOK_HEARTBEAT_TIMEOUT="8",
        ASYNCBOOK_SHARDS="4",
        ASYNCBOOK_VISIBILITY_TIMEOUT="30",
        ASYNCBOOK_WORKER_SWEEP="0",
    )
    assert app.conf.broker_url == "redis://127.0.0.1:6390/3"
    assert app.conf.result_backend == "asyncbook+redis://127.0.0.1:6390/3"
    assert app.conf.task_default_queue == "jobs"
    assert app.conf.broker_transport_options["visibility_timeout"] == 30.0
    settings = Settings.from_conf(app.conf)
    assert settings.extra == {}
    assert settings.redis_url == "redis://127.0.0.1:6391/4"
    assert (settings.namespace, settings.queue, settings.shards) == ("proj", "jobs-asyncbook", 4)
    assert settings.sinks == ("http://127.0.0.1:9/hook",)
    assert (settings.heartbeat_interval, settings.heartbeat_timeout_ms) == (2.0, 8000)
    assert settings.worker_sweep is False
