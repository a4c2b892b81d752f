"""Notification sinks: a Python callable, or an HTTP webhook.

A sink takes one ``Notification`` and returns when it has been handed over; raising
leaves the notification for redelivery (``PermanentSinkError``: it never can be, so it
is given up). Delivery is at least once, so a webhook sends a ``webhook-id`` unique to
the notification (the same at each redelivery) for the receiver to drop repeats, and
an ``Idempotency-Key`` (``taskId:state``, percent-encoded where a header needs it);
given a secret, it is also signed the Standard Webhooks way (``_webhook_signing``).
No log line or error shows a credential of the URL (``shown_webhook_url``).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

from ._dotted import import_path
from ._models import AnyNotification, GroupNotification, Notification, to_wire
from ._webhook_signing import WebhookSecret, signed_headers, webhook_id, webhook_secrets
from .errors import invalid

__all__ = [
    "GroupSink",
    "PermanentSinkError",
    "Sink",
    "SinkError",
    "WebhookSink",
    "idempotency_key",
    "resolve_sink",
    "shown_webhook_url",
]

logger = logging.getLogger("asyncbook.sinks")

Sink = Callable[[Notification], Any]
"""Hands one task's notification over; raises if it could not."""
GroupSink = Callable[[GroupNotification], Any]
"""Hands one group's notification over (extension); raises if it could not."""


class SinkError(Exception):
    """Raised when a sink could not hand a notification over (it will be redelivered)."""


class PermanentSinkError(SinkError):
    """Raised when a sink never can hand this notification over (the request cannot even
    be made): delivery gives it up, logged as an error, instead of retrying for ever."""


# What goes into a header as it is: visible ASCII but % (RFC 9110 field values; a space
# would be trimmed at either end). Everything else is percent-encoded, byte by byte of
# its UTF-8 (RFC 3986 section 2.1), so every id a book accepts can be sent, and decoded.
_HEADER_SAFE = "".join(chr(code) for code in range(0x21, 0x7F) if chr(code) != "%")


def header_text(text: str) -> str:
    """``text`` as a header value: visible ASCII but ``%`` as it is, every other character
    percent-encoded (its UTF-8 bytes); ``urllib.parse.unquote`` gives ``text`` back."""
    return quote(text, safe=_HEADER_SAFE)


def idempotency_key(notification: AnyNotification) -> str:
    """The same for every redelivery of one notification: ``taskId:state`` (one per
    terminal state), or ``group:groupId`` (one per group); each id percent-encoded as
    ``header_text`` does, so that the key is always a valid header value."""
    if isinstance(notification, GroupNotification):
        return f"group:{header_text(notification.group_id)}"
    return f"{header_text(notification.task_id)}:{notification.state.value}"


def shown_webhook_url(url: str) -> str:
    """``url`` with its credentials hidden, for logs and errors: the user-info and each
    query value become ``***`` (``https://***@host/path?token=***``)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<webhook url>"
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rsplit("@", 1)[1]
    query = parts.query
    if query:
        names = [name for name, _ in parse_qsl(query, keep_blank_values=True)]
        query = "&".join(f"{quote(name, safe='')}=***" for name in names) or "***"
    fragment = "***" if parts.fragment else ""
    return urlunsplit(parts._replace(netloc=netloc, query=query, fragment=fragment))


class WebhookSink:
    """POSTs each notification as JSON through httpx; retries a bounded number of times.

    2xx is delivered. 408, 429, 5xx and network errors are retried ``retries`` times
    (``backoff`` seconds, doubling); then, like any other status, ``SinkError``. One
    httpx client per process keeps the connection alive between notifications; pass
    ``http2=True`` to speak HTTP/2 where the receiver does (needs ``httpx[http2]``).

    With ``secret`` (``whsec_<base64>``), or ``secrets`` while rotating (the current one
    first), each POST is signed as Standard Webhooks says: ``webhook-timestamp`` (each
    attempt's, in seconds), ``webhook-signature`` (one ``v1,<signature>`` per secret) and
    ``webhook-id``: unique to the notification in ``namespace`` (the book's), the same
    for every delivery of it.

    A request that cannot be made at all (a header that is not a valid value, a bad URL)
    raises ``PermanentSinkError``. Logs and errors show the URL as ``shown_webhook_url``.
    """

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 5.0,
        retries: int = 3,
        backoff: float = 0.2,
        headers: Mapping[str, str] | None = None,
        http2: bool = False,
        secret: str | bytes | WebhookSecret | None = None,
        secrets: Sequence[str | bytes | WebhookSecret] | None = None,
        namespace: str = "asyncbook",
    ) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise invalid("webhook url must start with http:// or https://", field="url")
        if secret is not None and secrets is not None:
            raise invalid("give secret or secrets, not both", field="secrets")
        self.secrets = (
            webhook_secrets(secret, "secret")
            if secrets is None
            else webhook_secrets(secrets, "secrets")
        )
        """The signing secrets, the current one first; none: the POSTs are unsigned."""
        if self.secrets and any(name.lower().startswith("webhook-") for name in headers or {}):
            raise invalid("headers must not set the webhook-* headers it signs", field="headers")
        self.url = url
        self.shown_url = shown_webhook_url(url)
        """The URL as logs and errors show it (its credentials hidden)."""
        self.namespace = namespace
        """The book's namespace: part of every ``webhook-id``."""
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.headers = dict(headers or {})
        self.http2 = http2
        self._client: Any = None
        self._client_pid = 0

    def __repr__(self) -> str:
        signed = f", {len(self.secrets)} secret(s)" if self.secrets else ""
        return f"WebhookSink({self.shown_url!r}{signed})"

    def _http(self) -> Any:
        # httpx is imported here, not at import time: `import asyncbook` stays light.
        # A client does not survive fork: a pool child builds its own.
        if self._client is None or self._client_pid != os.getpid():
            import httpx

            self._client = httpx.Client(timeout=self.timeout, http2=self.http2)
            self._client_pid = os.getpid()
        return self._client

    def close(self) -> None:
        """Close the kept-alive connection (it reopens on the next notification)."""
        if self._client is not None and self._client_pid == os.getpid():
            self._client.close()
        self._client = None

    def __call__(self, notification: AnyNotification) -> int:
        """Deliver ``notification``; returns the HTTP status."""
        import httpx

        body = json.dumps(to_wire(notification)).encode()
        message_id = webhook_id(notification, self.namespace)
        key = idempotency_key(notification)
        headers = {"Content-Type": "application/json", "Idempotency-Key": key, **self.headers}
        shown = self.shown_url
        delay = self.backoff
        for attempt in range(self.retries + 1):
            if self.secrets:  # signed again at each attempt: its timestamp is the attempt's
                signature = signed_headers(self.secrets, message_id, int(time.time()), body)
                headers.update(signature)
            try:
                response = self._http().post(self.url, content=body, headers=headers)
            except (httpx.LocalProtocolError, httpx.UnsupportedProtocol, httpx.InvalidURL) as error:
                raise PermanentSinkError(
                    f"{shown}: request refused: {self._hidden(error)}"
                ) from None
            except ValueError as error:  # a header httpx cannot encode (UnicodeEncodeError)
                raise PermanentSinkError(
                    f"{shown}: request refused: {self._hidden(error)}"
                ) from None
            except httpx.HTTPError as error:
                problem = f"{shown} unreachable: {self._hidden(error)}"
            else:
                status: int = response.status_code
                if 200 <= status < 300:
                    return status
                if status not in (408, 429) and status < 500:
                    raise SinkError(f"{shown} answered {status}")
                problem = f"{shown} answered {status}"
            if attempt < self.retries:
                logger.warning("asyncbook: webhook %s, retrying in %.2f s", problem, delay)
                time.sleep(delay)
                delay *= 2
        raise SinkError(f"{problem} (after {self.retries + 1} attempts)")

    def _hidden(self, error: BaseException) -> str:
        """``repr(error)`` with the URL (and its credentials) shown as in logs."""
        text = repr(error).replace(self.url, self.shown_url)
        parts = urlsplit(self.url)
        user_info = parts.netloc.rsplit("@", 1)[0] if "@" in parts.netloc else ""
        for secret in (user_info, parts.query, parts.fragment):
            if secret:
                text = text.replace(secret, "***")
        return text


def resolve_sink(
    spec: Any, *, secrets: Sequence[WebhookSecret] = (), namespace: str = "asyncbook"
) -> Sink:
    """A sink from a setting: a callable, a webhook URL (signed with ``secrets``, if any;
    its ``webhook-id`` unique in ``namespace``), or a dotted path to a callable."""
    if callable(spec):
        return spec  # type: ignore[no-any-return]
    if isinstance(spec, str) and spec.startswith(("http://", "https://")):
        return WebhookSink(spec, secrets=secrets or None, namespace=namespace)
    if isinstance(spec, str):
        found = import_path(spec)
        if callable(found):
            return found  # type: ignore[no-any-return]
    raise invalid(f"sink {spec!r} is not a callable, a URL or a dotted path", field="sinks")
