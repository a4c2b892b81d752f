"""Following a task through a status server's stream, as a browser's ``EventSource`` does.

``asyncbook watch --api URL`` uses it: no Redis access is needed, only the server.
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Callable, Iterator
from typing import Any, NoReturn
from urllib.error import HTTPError
from urllib.parse import quote
from urllib.request import Request, urlopen

from .._watch import Message
from ..errors import AsyncBookError, UnknownTaskError

__all__ = ["follow_stream"]


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
    stream: str = "stream",
) -> dict[str, Any] | None:
    """Follow a task through a status server's stream, as a browser's ``EventSource`` does.

    Sends ``Last-Event-ID`` with the last version seen, so a dropped connection (or a
    restarted server) resumes exactly. Returns the ``end`` event's data, or None when
    ``stop()`` said so. An unknown task raises ``UnknownTaskError``; a refused request
    (bad cursor, wrong token) ``AsyncBookError``. ``stream="output-stream"`` follows the
    task's output instead (ids: chunk numbers).
    """
    url = base_url.rstrip("/") + "/api/tasks/" + quote(task_id, safe="") + "/" + stream
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
