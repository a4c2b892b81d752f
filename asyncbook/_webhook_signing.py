"""Standard Webhooks signatures (https://www.standardwebhooks.com): the secrets a webhook
is signed with, and its ``webhook-id``, ``webhook-timestamp`` and ``webhook-signature``.

The signed content is ``{webhook-id}.{webhook-timestamp}.{body}``, the body exactly as
sent. Each secret adds one ``v1,<base64 HMAC-SHA256>`` to the signature header, space
separated: while a secret is rotated, a receiver holding either the new or the old one
verifies. A secret is written ``whsec_<base64>`` (the specification's form), 24 to 64
bytes once decoded; no repr, log line or error message shows it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Sequence
from typing import Any

from ._models import AnyNotification, GroupNotification
from .errors import invalid

__all__ = ["SECRET_PREFIX", "WebhookSecret", "signed_headers", "webhook_id", "webhook_secrets"]

SECRET_PREFIX = "whsec_"
KEY_BYTES = range(24, 65)
"""The specification's key lengths: 24 to 64 random bytes."""


class WebhookSecret:
    """One HMAC-SHA256 signing key (its repr hides it)."""

    __slots__ = ("_key",)

    def __init__(self, key: bytes) -> None:
        self._key = key

    @classmethod
    def parse(cls, value: Any, field: str) -> WebhookSecret:
        """A ``whsec_<base64>`` string (padding optional), the key's raw bytes, or a
        ``WebhookSecret``; anything else, or a key not 24 to 64 bytes long, is an
        ``invalid-request`` naming ``field``."""
        if isinstance(value, WebhookSecret):
            return value
        if isinstance(value, str):
            text = value.strip()
            if not text.startswith(SECRET_PREFIX):
                raise invalid(f"{field} must start with {SECRET_PREFIX}", field=field)
            encoded = text[len(SECRET_PREFIX) :].rstrip("=")
            try:
                key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
            except (binascii.Error, ValueError):
                raise invalid(
                    f"{field} must be {SECRET_PREFIX} followed by base64", field=field
                ) from None
        elif isinstance(value, bytes):
            key = value
        else:
            raise invalid(f"{field} must be a {SECRET_PREFIX}<base64> string", field=field)
        if len(key) not in KEY_BYTES:
            raise invalid(f"{field} must hold 24 to 64 bytes (it holds {len(key)})", field=field)
        return cls(key)

    def sign(self, content: bytes) -> str:
        """``v1,<base64 HMAC-SHA256 of content>``."""
        digest = hmac.new(self._key, content, hashlib.sha256).digest()
        return "v1," + base64.b64encode(digest).decode()

    def __repr__(self) -> str:
        return "WebhookSecret(<hidden>)"


def webhook_secrets(value: Any, field: str) -> tuple[WebhookSecret, ...]:
    """The secrets of a setting: None (unsigned), one secret, or a list of them (the
    current one first, then the one being retired)."""
    if value is None:
        return ()
    values = value if isinstance(value, list | tuple) else [value]
    if not values:
        raise invalid(f"{field} must hold at least one secret", field=field)
    return tuple(WebhookSecret.parse(one, field) for one in values)


def webhook_id(notification: AnyNotification, namespace: str = "asyncbook") -> str:
    """The ``webhook-id`` of a notification: ``msg_`` and 32 hex digits of the SHA-256 of
    what makes it one notification (the namespace, the task, its state, the version that
    reached it and the time; for a group, the group and the time). The same for each
    delivery of it; another for a task id used again after retention, or in another
    namespace. Free of ``.`` whatever the ids hold."""
    if isinstance(notification, GroupNotification):
        parts: list[Any] = [namespace, "group", notification.group_id, notification.at_ms]
    else:
        parts = [
            namespace,
            "task",
            notification.task_id,
            notification.state.value,
            notification.version,
            notification.at_ms,
        ]
    identity = json.dumps(parts, ensure_ascii=False, separators=(",", ":"))
    return "msg_" + hashlib.sha256(identity.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def signed_headers(
    secrets: Sequence[WebhookSecret], message_id: str, timestamp: int, body: bytes
) -> dict[str, str]:
    """The three Standard Webhooks headers of one attempt to send ``body``."""
    content = f"{message_id}.{timestamp}.".encode() + body
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(secret.sign(content) for secret in secrets),
    }
