"""Notification sinks: a Python callable, or an HTTP webhook.

A sink takes one ``Notification`` and returns when it has been handed over; raising
leaves the notification for redelivery. Delivery is at least once, so a webhook sends
an ``Idempotency-Key`` (``taskId:state``: one terminal state per task) for the receiver
to drop repeats.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from ._dotted import import_path
from ._models import Notification, to_wire
from .errors import invalid

__all__ = ["Sink", "SinkError", "WebhookSink", "idempotency_key", "resolve_sink"]

logger = logging.getLogger("asyncbook.sinks")

Sink = Callable[[Notification], Any]
"""Hands one notification over; raises if it could not."""


class SinkError(Exception):
    """Raised when a sink could not hand a notification over (it will be redelivered)."""


def idempotency_key(notification: Notification) -> str:
    """``taskId:state``: the same for every redelivery of one notification."""
    return f"{notification.task_id}:{notification.state.value}"


class WebhookSink:
    """POSTs each notification as JSON; retries with backoff, a bounded number of times.

    2xx is delivered. 408, 429, 5xx and network errors are retried ``retries`` times
    (``backoff`` seconds, doubling); then, like any other status, ``SinkError``.
    """

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 5.0,
        retries: int = 3,
        backoff: float = 0.2,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise invalid("webhook url must start with http:// or https://", field="url")
        self.url = url
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.headers = dict(headers or {})

    def __repr__(self) -> str:
        return f"WebhookSink({self.url!r})"

    def __call__(self, notification: Notification) -> int:
        """Deliver ``notification``; returns the HTTP status."""
        body = json.dumps(to_wire(notification)).encode()
        headers = {
            "Content-Type": "application/json",
            "Idempotency-Key": idempotency_key(notification),
            **self.headers,
        }
        delay = self.backoff
        for attempt in range(self.retries + 1):
            request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    return int(response.status)
            except urllib.error.HTTPError as error:
                if error.code not in (408, 429) and error.code < 500:
                    raise SinkError(f"{self.url} answered {error.code}") from error
                problem = f"{self.url} answered {error.code}"
            except (urllib.error.URLError, OSError) as error:
                problem = f"{self.url} unreachable: {error}"
            if attempt < self.retries:
                logger.warning("asyncbook: webhook %s, retrying in %.2f s", problem, delay)
                time.sleep(delay)
                delay *= 2
        raise SinkError(f"{problem} (after {self.retries + 1} attempts)")


def resolve_sink(spec: Any) -> Sink:
    """A sink from a setting: a callable, a webhook URL, or a dotted path to a callable."""
    if callable(spec):
        return spec  # type: ignore[no-any-return]
    if isinstance(spec, str) and spec.startswith(("http://", "https://")):
        return WebhookSink(spec)
    if isinstance(spec, str):
        found = import_path(spec)
        if callable(found):
            return found  # type: ignore[no-any-return]
    raise invalid(f"sink {spec!r} is not a callable, a URL or a dotted path", field="sinks")
