"""Tasks to retry: ended tasks created with a kept message, as the Celery integration
keeps it (``asyncbook_keep_messages``), without a Celery app."""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator
from typing import Any
from unittest import mock

import redis

from asyncbook import PublishInfo, RedisBook
from asyncbook._kept import KeptMessage

from .web_server import WEB_REDIS_URL

HOUR_MS = 3_600_000


def kept_message(name: str = "app.flaky", queue: str = "celery") -> KeptMessage:
    """A protocol 2 message of task ``name`` with args ``("ünï", [1, 2])`` and kwargs
    ``{"k": {"é": None}}``, routed to ``queue``, as Celery's JSON serializer writes it."""
    body = json.dumps([["ünï", [1, 2]], {"k": {"é": None}}, {}]).encode("utf-8")
    headers = {
        "lang": "py",
        "task": name,
        "id": "first",
        "root_id": "first",
        "parent_id": "its-parent",
        "retries": 2,
        "eta": "2026-01-01T00:00:00+00:00",
        "expires": "2026-01-01T01:00:00+00:00",
        "argsrepr": "('ünï', [1, 2])",
        "kwargsrepr": "{'k': {'é': None}}",
        "timelimit": [None, None],
    }
    return KeptMessage(name, body, "application/json", "utf-8", headers, {"priority": 3}, "", queue)


def ended_task(
    book: RedisBook,
    task_id: str,
    state: str = "failed",
    message: KeptMessage | str | None = None,
    name: str = "app.flaky",
) -> None:
    """Task ``task_id`` of ``name`` created with ``message`` (a ``KeptMessage``, its JSON
    or None: not kept), then brought to ``state`` (failed, cancelled or left queued)."""
    now = book.now_ms()
    kept = message.to_json() if isinstance(message, KeptMessage) else message
    info = PublishInfo(name=name, args="('ünï', [1, 2])", queue="celery", message=kept)
    book.create(id=task_id, now_ms=now, ttl_ms=HOUR_MS, max_attempts=2, info=info)
    if state == "failed":
        book.apply(task_id, {"type": "start", "atMs": now + 1, "worker": "w@h"})
        book.apply(task_id, {"type": "fail", "atMs": now + 2, "error": "x", "retryable": False})
    elif state == "cancelled":
        book.cancel(task_id, "stop")


@contextlib.contextmanager
def script_calls() -> Iterator[list[str]]:
    """The SHA of every script a pipeline runs meanwhile (``EVALSHA``; ``EVAL``: its
    source's SHA; ``FCALL``: the function's name), in order, in any thread of this
    process."""
    shas: list[str] = []
    queue = redis.client.Pipeline.pipeline_execute_command

    def spy(pipe: redis.client.Pipeline, *args: Any, **options: Any) -> Any:
        if args and str(args[0]).upper() in ("EVALSHA", "FCALL"):
            shas.append(args[1].decode() if isinstance(args[1], bytes) else str(args[1]))
        elif args and str(args[0]).upper() == "EVAL":
            shas.append(hashlib.sha1(str(args[1]).encode()).hexdigest())
        return queue(pipe, *args, **options)

    with mock.patch.object(redis.client.Pipeline, "pipeline_execute_command", spy):
        yield shas


def sent(queue: str) -> list[dict[str, Any]]:
    """The messages the broker holds for ``queue`` (kombu's Redis transport: a list per
    queue and priority), oldest first."""
    client = redis.Redis.from_url(WEB_REDIS_URL)
    try:
        found = []
        for key in client.scan_iter(match=f"{queue}*"):
            found += [json.loads(raw) for raw in reversed(client.lrange(key, 0, -1))]
        return found
    finally:
        client.close()
