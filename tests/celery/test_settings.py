"""Settings from app.conf, task options, and the ids and hashes events carry."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import fakeredis
import pytest
from celery import Celery

from asyncbook import AsyncBookError, FailEvent, MemoryBook, RedisBook, WebhookSink
from asyncbook._dotted import import_path
from asyncbook.celery import install, uninstall
from asyncbook.celery._info import InfoPolicy
from asyncbook.celery._settings import Settings, duration_ms
from asyncbook.celery._tracking import (
    UNLIMITED_ATTEMPTS,
    callback_id,
    is_tracked,
    max_attempts,
    result_hash,
    ttl_ms,
)


def test_defaults_follow_a_redis_broker() -> None:
    settings = Settings.from_conf({"broker_url": "redis://10.0.0.5:6380/3"})
    assert settings.redis_url == "redis://10.0.0.5:6380/3"
    assert settings.default_ttl_ms == 3_600_000
    assert Settings.from_conf({"broker_url": "amqp://x"}).redis_url.startswith("redis://")


def test_settings_are_read_under_the_prefix() -> None:
    settings = Settings.from_conf(
        {
            "asyncbook_redis_url": "redis://h:1/2",
            "asyncbook_namespace": "ns",
            "asyncbook_default_ttl": timedelta(minutes=2),
            "asyncbook_retry_for": 3,
            "asyncbook_sinks": print,
            "asyncbook_typo": 1,
        }
    )
    assert (settings.redis_url, settings.namespace) == ("redis://h:1/2", "ns")
    assert settings.default_ttl_ms == 120_000
    assert settings.retry_for == 3.0
    assert settings.sinks == (print,)
    assert settings.extra == {"typo": 1}


def test_redelivery_idle_and_queue_settings() -> None:
    defaults = Settings.from_conf({})
    assert (defaults.redelivery_idle_ms, defaults.queue) == (60_000, "asyncbook")
    settings = Settings.from_conf(
        {"asyncbook_redelivery_idle": timedelta(seconds=5), "asyncbook_queue": "house"}
    )
    assert (settings.redelivery_idle_ms, settings.queue) == (5_000, "house")
    assert Settings.from_conf({"asyncbook_redelivery_idle": 0.25}).redelivery_idle_ms == 250
    assert settings.extra == {}
    with pytest.raises(AsyncBookError, match="asyncbook_redelivery_idle"):
        Settings.from_conf({"asyncbook_redelivery_idle": 0})


def test_unknown_settings_are_warned_about_when_first_read(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = Celery("settings", broker="memory://", set_as_current=False)
    app.conf.asyncbook_flush_dealy = 1
    with caplog.at_level(logging.WARNING, "asyncbook.celery"):
        integration = install(app, MemoryBook())
        assert "asyncbook_flush_dealy" not in caplog.text  # install reads no setting
        assert integration.settings.flush_delay == Settings.flush_delay
    try:
        assert "asyncbook_flush_dealy" in caplog.text
        assert install(app) is integration  # once per app
    finally:
        uninstall(app)


@pytest.mark.parametrize("value", [0, -1, "5", None, True])
def test_durations_must_be_positive(value: Any) -> None:
    with pytest.raises(AsyncBookError):
        duration_ms(value, "ttl")


def test_import_path() -> None:
    assert import_path("os.path:join") is import_path("os.path.join")
    with pytest.raises(AsyncBookError):
        import_path("nothing")


class Options:
    tracked = True
    ttl = timedelta(seconds=90)
    max_retries = 2


def test_task_options() -> None:
    assert is_tracked(Options)
    assert not is_tracked(object())
    assert ttl_ms(Options, 5) == 90_000
    assert ttl_ms(object(), 5) == 5
    assert max_attempts(Options) == 3
    unlimited = type("Unlimited", (), {"max_retries": None})
    assert max_attempts(unlimited) == UNLIMITED_ATTEMPTS
    explicit = type("Explicit", (), {"max_retries": 2, "max_attempts": 7})
    assert max_attempts(explicit) == 7


def test_callback_ids_and_hashes_are_stable() -> None:
    assert callback_id("t", "progress", 1, 40) == "celery:t:progress:1:40"
    assert callback_id("t", "start", 0) != callback_id("t", "start", 1)
    assert result_hash({"b": 1, "a": [1, 2]}) == result_hash({"a": [1, 2], "b": 1})
    assert result_hash({"a": 1}).startswith("sha256:")
    assert result_hash(object) == result_hash(object)  # no JSON: hashed through repr


def test_console_info_settings() -> None:
    settings = Settings.from_conf(
        {"asyncbook_record_args": False, "asyncbook_info_limit": 64, "asyncbook_redact": "pin"}
    )
    assert (settings.record_info, settings.record_args) == (True, False)
    assert (settings.info_limit, settings.redact) == (64, ("pin",))
    assert "password" in Settings().redact
    with pytest.raises(AsyncBookError, match="asyncbook_info_limit"):
        Settings.from_conf({"asyncbook_info_limit": 3})
    with pytest.raises(AsyncBookError, match="asyncbook_redact"):
        Settings.from_conf({"asyncbook_redact": [1]})


def test_keep_message_settings() -> None:
    assert (Settings().keep_messages, Settings().keep_message_limit) == (False, 1_048_576)
    settings = Settings.from_conf(
        {"asyncbook_keep_messages": True, "asyncbook_keep_message_limit": 4096}
    )
    assert (settings.keep_messages, settings.keep_message_limit, settings.extra) == (True, 4096, {})
    for bad in (0, -1, 1.5, "1MiB", True):
        with pytest.raises(AsyncBookError, match="asyncbook_keep_message_limit"):
            Settings.from_conf({"asyncbook_keep_message_limit": bad})


def test_shards_setting() -> None:
    assert Settings().shards == 1
    settings = Settings.from_conf({"asyncbook_shards": 4})
    assert (settings.shards, settings.extra) == (4, {})
    for bad in (0, -1, 1025, 2.0, "4", True, None):
        with pytest.raises(AsyncBookError) as caught:
            Settings.from_conf({"asyncbook_shards": bad})
        assert caught.value.field == "asyncbook_shards"


def test_a_shard_count_the_given_book_has_not_is_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = Celery("settings", broker="memory://", set_as_current=False)
    app.conf.asyncbook_shards = 4
    sharded = RedisBook(fakeredis.FakeRedis(), namespace="n", shards=4)
    with caplog.at_level(logging.WARNING, "asyncbook.celery"):
        for book, warned in ((sharded, False), (MemoryBook(), True)):
            caplog.clear()
            integration = install(app, book)
            try:
                assert integration.settings.shards == 4
                assert ("asyncbook_shards = 4 ignored" in caplog.text) is warned, caplog.text
            finally:
                uninstall(app)


def test_info_policy_bounds_masks_and_keeps_a_tracebacks_end() -> None:
    policy = InfoPolicy(limit=32, redact=["Token"])
    args, kwargs = policy.render(("x" * 100, 2), {"token": "s3cret", "n": 1})
    assert args is not None
    assert len(args) <= 32
    assert args.endswith("…")
    assert kwargs == "{'token': '***', 'n': 1}"
    assert InfoPolicy(record_args=False).render((1,), {}) == (None, None)
    event = FailEvent(at_ms=1, error="boom", retryable=False)
    wire = policy.failure_event(event, ValueError("boom"), "Traceback\n" + "x" * 9000 + "\nEnd")
    assert wire["exception"] == "ValueError"
    assert wire["traceback"].endswith("\nEnd")
    assert len(wire["traceback"]) == 4096
    assert wire["type"] == "fail"
    assert InfoPolicy(record_info=False).failure_event(event, None, "tb") is event
    info = policy.publish_info("app.gen", {"parent_id": "p"}, ((1,), {}, {}), "celery")
    assert info is not None
    assert (info.name, info.parent_id, info.queue) == (
        "app.gen",
        "p",
        "celery",
    )
    assert InfoPolicy(record_info=False).publish_info("app.gen", {}, None, None) is None


def test_webhook_secrets_sign_the_webhook_urls_of_both_sink_settings() -> None:
    current, previous = "whsec_" + "A" * 32, "whsec_" + "B" * 32
    app = Celery("signed", broker="memory://", set_as_current=False)
    app.conf.asyncbook_sinks = ["http://127.0.0.1:1/tasks", print]
    app.conf.asyncbook_group_sinks = "http://127.0.0.1:1/groups"
    app.conf.asyncbook_webhook_secret = [current, previous]
    integration = install(app, MemoryBook())
    try:
        webhook, callable_sink = integration.sinks
        (group_webhook,) = integration.group_sinks
        assert isinstance(webhook, WebhookSink)
        assert isinstance(group_webhook, WebhookSink)
        assert len(webhook.secrets) == len(group_webhook.secrets) == 2
        assert callable_sink is print
        assert "A" * 32 not in repr(integration.settings)
    finally:
        uninstall(app)
    one = Settings.from_conf({"asyncbook_webhook_secret": current})
    assert len(one.webhook_secrets) == 1
    assert Settings.from_conf({}).webhook_secrets == ()


@pytest.mark.parametrize("value", ["A" * 32, "whsec_tooshort", [], 7, ["whsec_" + "A" * 32, b""]])
def test_a_bad_webhook_secret_setting_is_named(value: Any) -> None:
    with pytest.raises(AsyncBookError) as caught:
        Settings.from_conf({"asyncbook_webhook_secret": value})
    assert caught.value.field == "asyncbook_webhook_secret"


def test_exit_wait_setting() -> None:
    assert Settings.from_conf({}).exit_wait == 2.0
    assert Settings.from_conf({"asyncbook_exit_wait": 0}).exit_wait == 0.0
    assert Settings.from_conf({"asyncbook_exit_wait": timedelta(seconds=5)}).exit_wait == 5.0
    with pytest.raises(AsyncBookError, match="asyncbook_exit_wait"):
        Settings.from_conf({"asyncbook_exit_wait": -1})
