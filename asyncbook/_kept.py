"""``KeptMessage``: a tracked task's message as published, kept to send it again.

The Celery integration keeps it (``asyncbook_keep_messages``) in the create that records
the task, under a key of the task's own that no read, page or command shows; a retry
sends it again under a new id. The body stays as serialized (its content type and
encoding with it), so the arguments are exactly what the publisher sent, whatever the
serializer.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Any

from .errors import invalid

__all__ = ["KEPT_MESSAGE_LIMIT", "KeptMessage", "omission", "why_omitted"]

KEPT_MESSAGE_LIMIT = 1_048_576
"""The default largest kept message, in bytes (``asyncbook_keep_message_limit``)."""

_VERSION = 1


@dataclass(frozen=True)
class KeptMessage:
    """What sending a task again needs: its name, body as serialized, headers, routing."""

    name: str
    body: bytes
    content_type: str
    content_encoding: str
    headers: dict[str, Any] = field(default_factory=dict)
    properties: dict[str, Any] = field(default_factory=dict)
    """Message properties besides the routing (``priority``...)."""
    exchange: str = ""
    routing_key: str = ""

    def to_json(self) -> str:
        """The message as one JSON text (the body in base64); values JSON lacks as text."""
        return json.dumps(
            {
                "v": _VERSION,
                "name": self.name,
                "body": base64.b64encode(self.body).decode("ascii"),
                "contentType": self.content_type,
                "contentEncoding": self.content_encoding,
                "headers": self.headers,
                "properties": self.properties,
                "exchange": self.exchange,
                "routingKey": self.routing_key,
            },
            default=str,
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> KeptMessage:
        """The message ``to_json`` wrote; ``AsyncBookError`` (field message) if damaged."""
        try:
            data = json.loads(text)
            if data.get("v") != _VERSION:
                raise ValueError("unknown version")
            return cls(
                name=str(data["name"]),
                body=base64.b64decode(data["body"], validate=True),
                content_type=str(data["contentType"]),
                content_encoding=str(data["contentEncoding"]),
                headers=dict(data["headers"]),
                properties=dict(data["properties"]),
                exchange=str(data["exchange"]),
                routing_key=str(data["routingKey"]),
            )
        except (ValueError, KeyError, TypeError, AttributeError, binascii.Error):
            raise invalid("the kept message is damaged", field="message") from None


def omission(size: int, limit: int) -> str:
    """What is kept instead of a message over ``limit`` bytes: its size, so that a retry
    says why it cannot send the task again."""
    return json.dumps({"v": _VERSION, "omittedBytes": size, "limit": limit})


def why_omitted(text: str | bytes) -> str | None:
    """Why the message was not kept, when ``text`` is an ``omission``; else None."""
    try:
        data = json.loads(text)
        size, limit = data["omittedBytes"], data["limit"]
    except (ValueError, KeyError, TypeError):
        return None
    return (
        f"the task's message was not kept: {size} bytes, over asyncbook_keep_message_limit "
        f"({limit} bytes)"
    )
