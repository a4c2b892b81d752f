"""``KeptMessage``: a tracked task's message as published, kept to send it again.

The Celery integration keeps it (``asyncbook_keep_messages``) in the create that records
the task, under a key of the task's own that no read, page or command shows; a resend
sends it again under a new id. The body stays as serialized (its content type and
encoding with it), so the arguments are exactly what the publisher sent, whatever the
serializer. A message that is not kept leaves an ``omission`` in its place: too large,
or carrying a keyword argument ``asyncbook_redact`` masks (kept in plain text, it would
be readable at rest for the whole retention).
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
from dataclasses import dataclass, field
from typing import Any

from .errors import invalid

__all__ = [
    "JSON_BODY",
    "KEPT_MESSAGE_LIMIT",
    "OMISSION_PREFIX",
    "KeptMessage",
    "json_record",
    "omission",
    "redacted_omission",
    "why_omitted",
]

KEPT_MESSAGE_LIMIT = 1_048_576
"""The default largest kept message, in bytes (``asyncbook_keep_message_limit``)."""

_VERSION = 1
OMISSION_PREFIX = '{"v": 1, "omitted'
"""How every omission starts, and no kept message does (info.lua reads only this much)."""
JSON_BODY = ("application/json", "utf-8")
"""The content type and encoding of a JSON body (kombu's ``json`` serializer)."""
_encode = json.JSONEncoder(separators=(",", ":"), default=str, check_circular=False).encode


def _shared_fields(
    name: str, content_type: str, content_encoding: str, exchange: str, routing_key: str
) -> dict[str, Any]:
    """The fields every kept message of a task shares, first in either form."""
    return {
        "v": _VERSION,
        "name": name,
        "contentType": content_type,
        "contentEncoding": content_encoding,
        "exchange": exchange,
        "routingKey": routing_key,
    }


@functools.lru_cache(maxsize=1024)
def _prefix(
    name: str, content_type: str, content_encoding: str, exchange: str, routing_key: str
) -> str:
    """The start of a kept message's JSON: the shared fields, encoded once per task."""
    fields = _shared_fields(name, content_type, content_encoding, exchange, routing_key)
    return _encode(fields)[:-1]  # without its closing brace: more fields follow


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
        """The message as one JSON text (the body in base64); values JSON lacks as text.

        Written at every tracked publish: the fields a task's messages share are encoded
        once (``_prefix``), the headers with a reused encoder."""
        properties = _encode(self.properties) if self.properties else "{}"
        return (
            _prefix(
                self.name,
                self.content_type,
                self.content_encoding,
                self.exchange,
                self.routing_key,
            )
            + ',"headers":'
            + _encode(self.headers)
            + ',"properties":'
            + properties
            + ',"body":"'
            + base64.b64encode(self.body).decode("ascii")
            + '"}'
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> KeptMessage:
        """The message ``to_json`` wrote; ``AsyncBookError`` (field message) if damaged."""
        try:
            data = json.loads(text)
            if data.get("v") != _VERSION:
                raise ValueError("unknown version")
            if "json" in data:  # a JSON body kept as a value (json_record)
                body = json.dumps(data["json"], separators=(",", ":")).encode("utf-8")
            else:
                body = base64.b64decode(data["body"], validate=True)
            return cls(
                name=str(data["name"]),
                body=body,
                content_type=str(data["contentType"]),
                content_encoding=str(data["contentEncoding"]),
                headers=dict(data["headers"]),
                properties=dict(data["properties"]),
                exchange=str(data["exchange"]),
                routing_key=str(data["routingKey"]),
            )
        except (ValueError, KeyError, TypeError, AttributeError, binascii.Error):
            raise invalid("the kept message is damaged", field="message") from None


def json_record(
    name: str,
    headers: dict[str, Any],
    properties: dict[str, Any],
    exchange: str,
    routing_key: str,
    body: Any,
) -> dict[str, Any]:
    """The kept message of a JSON body as one value to encode in one go (the Celery
    integration does, with kombu's JSON encoder, as the publish encodes the body): the
    body is kept as the JSON value it is sent as (``from_json`` encodes it again)."""
    content_type, content_encoding = JSON_BODY
    return {
        **_shared_fields(name, content_type, content_encoding, exchange, routing_key),
        "headers": headers,
        "properties": properties,
        "json": body,
    }


def omission(size: int, limit: int) -> str:
    """What is kept instead of a message over ``limit`` bytes: its size, so that a resend
    says why it cannot send the task again."""
    return json.dumps({"v": _VERSION, "omittedBytes": size, "limit": limit})


def redacted_omission(names: list[str]) -> str:
    """What is kept instead of a message that carries the keyword arguments ``names``,
    which ``asyncbook_redact`` masks: their names, never their values."""
    return json.dumps({"v": _VERSION, "omittedRedacted": names})


def why_omitted(text: str | bytes) -> tuple[str, str] | None:
    """The refusal code and why the message was not kept, when ``text`` is an
    ``omission``; else None."""
    try:
        data = json.loads(text)
        if "omittedRedacted" in data:
            names = ", ".join(map(str, data["omittedRedacted"]))
            return (
                "no-message",
                f"the task's message was not kept: it carries {names}, which asyncbook_redact "
                "masks (name the task in asyncbook_keep_redacted_messages to keep it anyway)",
            )
        size, limit = data["omittedBytes"], data["limit"]
    except (ValueError, KeyError, TypeError):
        return None
    return (
        "message-too-large",
        f"the task's message was not kept: {size} bytes, over asyncbook_keep_message_limit "
        f"({limit} bytes)",
    )
