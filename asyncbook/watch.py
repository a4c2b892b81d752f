"""Following one task: the messages a watcher is sent, and blocking followers of them.

``follow_task`` follows the book's change channel on Redis; ``follow_stream`` follows a
status server's stream over HTTP (no Redis access needed).

A watcher that has seen version ``cursor`` is sent what SPEC's resume gives it: the
history entries it lacks (``change``) then the task without its history (``task``), or
the whole task (``snapshot``) when it is too far behind; ``end`` once the task is
terminal. The status server's streams and ``asyncbook watch`` send the same messages.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NoReturn
from urllib.error import HTTPError
from urllib.parse import quote
from urllib.request import Request, urlopen

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .book import AsyncBook
from .errors import AsyncBookError, UnknownTaskError
from .models import AsyncTask, ResumeResult, to_wire
from .redis_book import RedisBook

__all__ = [
    "Message",
    "follow_stream",
    "follow_task",
    "messages_for",
    "resume_light",
    "task_summary",
]


@dataclass(frozen=True)
class Message:
    """One message to a watcher: its name, its version (the SSE ``id:``) and JSON data."""

    event: str
    id: int | None
    data: dict[str, Any]


def task_summary(task: AsyncTask) -> dict[str, Any]:
    """The task's wire shape without its history."""
    wire = to_wire(task)
    wire.pop("history", None)
    return wire


def messages_for(result: ResumeResult, cursor: int, fresh: bool) -> list[Message]:
    """What a watcher at ``cursor`` is sent, from a resume made at or below its cursor.

    ``fresh`` (a watcher that was sent nothing yet) gets the task even when caught up.
    """
    task = result.task
    if task.version <= cursor:
        batch = [Message("task", task.version, task_summary(task))] if fresh else []
    elif result.mode == "snapshot":
        batch = [Message("snapshot", task.version, to_wire(task))]
    else:
        batch = [
            Message("change", e.version, to_wire(e)) for e in result.events if e.version > cursor
        ]
        batch.append(Message("task", task.version, task_summary(task)))
    if task.terminal and (batch or fresh):
        batch.append(Message("end", None, {"state": task.state.value, "version": task.version}))
    return batch


def resume_light(book: AsyncBook, task_id: str, cursor: int) -> ResumeResult:
    """``book.resume`` without the history in caught-up and delta answers (O(new events))."""
    return book.resume(task_id, cursor, full_task=False)


_DROPPED = (RedisConnectionError, RedisTimeoutError, ConnectionError, OSError)


def follow_task(
    book: RedisBook,
    task_id: str,
    on_batch: Callable[[list[Message]], None],
    *,
    cursor: int = 0,
    poll: float = 1.0,
    max_backoff: float = 2.0,
    on_reconnect: Callable[[Exception], None] | None = None,
    stop: Callable[[], bool] = lambda: False,
) -> AsyncTask | None:
    """Call ``on_batch`` with each batch of messages until the task is terminal.

    Listens on the book's change channel and resumes from the last version it passed
    on; when the connection drops it reconnects and resumes again, so no version is
    skipped or repeated. Returns the terminal task, or None when ``stop()`` said so.
    ``UnknownTaskError`` propagates.
    """
    fresh, delay = True, 0.05
    last: AsyncTask | None = None
    while not stop():
        pubsub = book.client.pubsub()
        try:
            pubsub.subscribe(book.keys.changes_channel)
            pending = True  # resume once subscribed: changes before that were not heard
            while not stop():
                message = pubsub.get_message(timeout=poll)
                if message is not None and message.get("type") == "subscribe":
                    pending = True  # (re)subscribed, possibly after a silent reconnect
                elif message is not None and message.get("type") == "message":
                    pending = pending or _concerns(message.get("data"), task_id, cursor)
                if not pending:
                    continue
                pending = False
                result = resume_light(book, task_id, cursor)
                batch = messages_for(result, cursor, fresh)
                fresh = False
                cursor = max(cursor, result.task.version)
                last = result.task
                delay = 0.05
                if batch:
                    on_batch(batch)
                if result.task.terminal:
                    return last
        except _DROPPED as error:
            if on_reconnect is not None:
                on_reconnect(error)
            time.sleep(delay)
            delay = min(delay * 2, max_backoff)
        finally:
            with contextlib.suppress(*_DROPPED):
                pubsub.close()
    return None


def _concerns(payload: Any, task_id: str, cursor: int) -> bool:
    try:
        data = json.loads(payload)
    except (TypeError, ValueError):
        return False
    return (
        isinstance(data, dict)
        and data.get("taskId") == task_id
        and (not isinstance(data.get("version"), int) or data["version"] > cursor)
    )


_STREAM_DROPPED = (OSError, http.client.HTTPException, ValueError)


def follow_stream(
    base_url: str,
    task_id: str,
    on_batch: Callable[[list[Message]], None],
    *,
    cursor: int = 0,
    token: str | None = None,
    timeout: float = 45.0,
    max_backoff: float = 2.0,
    on_reconnect: Callable[[Exception], None] | None = None,
    stop: Callable[[], bool] = lambda: False,
) -> dict[str, Any] | None:
    """Follow a task through a status server's stream, as a browser's ``EventSource`` does.

    Sends ``Last-Event-ID`` with the last version seen, so a dropped connection (or a
    restarted server) resumes exactly. Returns the ``end`` event's data, or None when
    ``stop()`` said so. An unknown task raises ``UnknownTaskError``; a refused request
    (bad cursor, wrong token) ``AsyncBookError``.
    """
    url = base_url.rstrip("/") + "/api/tasks/" + quote(task_id, safe="") + "/stream"
    delay = 0.05
    while not stop():
        headers = {"Accept": "text/event-stream", "Last-Event-ID": str(cursor)}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        try:
            with urlopen(Request(url, headers=headers), timeout=timeout) as response:
                delay = 0.05
                for message in _read_events(response):
                    if message.event == "stream-error":
                        break  # the server cut this stream off: resume on a new one
                    if message.id is not None:
                        cursor = max(cursor, message.id)
                    on_batch([message])
                    if message.event == "end":
                        return message.data
                    if stop():
                        return None
            error: Exception = ConnectionError("the server closed the stream")
        except HTTPError as refused:
            _raise_refusal(refused, task_id)
        except _STREAM_DROPPED as dropped:
            error = dropped
        if on_reconnect is not None:
            on_reconnect(error)
        time.sleep(delay)
        delay = min(delay * 2, max_backoff)
    return None


def _raise_refusal(refused: HTTPError, task_id: str) -> NoReturn:
    with refused:
        if refused.code == 404:
            raise UnknownTaskError(task_id) from None
        try:
            message = json.loads(refused.read())["message"]
        except (ValueError, KeyError, TypeError, OSError):
            message = refused.reason
    raise AsyncBookError("invalid-request", f"the server said {refused.code}: {message}") from None


def _read_events(response: Any) -> Iterator[Message]:
    """Server-sent events from a response, one ``Message`` per dispatched event."""
    event, id_, data = "message", None, ""
    for raw in response:
        line = raw.decode("utf-8").rstrip("\r\n")
        if not line:
            if data:
                yield Message(event, id_, json.loads(data))
            event, id_, data = "message", None, ""
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            event = value
        elif name == "id" and value.isdigit():
            id_ = int(value)
        elif name == "data":
            data = value if not data else f"{data}\n{value}"
