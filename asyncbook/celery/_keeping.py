"""The message of a tracked task as published, kept for a resend (``asyncbook_keep_messages``).

``before_task_publish`` hands over the body before kombu serializes it: it is serialized
here with the task's serializer (kombu's ``dumps``, as the publish does), so the kept body
is the same bytes, whatever the serializer (pickle included). A JSON body (Celery's
default) is kept as the JSON value it is sent as, inside the kept record: one encoding
at publish instead of two. The headers are kept as
Celery wrote them, before asyncbook adds its own, but for those a resend sets anew (the
id, root and parent, retries, eta, expires, group).

A message whose keyword arguments include one ``asyncbook_redact`` masks is not kept
(``redacted_omission``: the names only), unless its task is named in
``asyncbook_keep_redacted_messages``: no masked value is stored in plain text.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from celery import Task
from kombu.serialization import dumps
from kombu.utils.json import dumps as json_dumps

from .._kept import KeptMessage, json_record, omission, redacted_omission
from ._tracing import PUBLISHED_HEADER, TRACE_HEADERS

__all__ = ["kept_message"]

_REPLACED = frozenset(
    {"id", "root_id", "parent_id", "retries", "eta", "expires", "group", "group_index"}
    | {*TRACE_HEADERS, PUBLISHED_HEADER}
)
"""Headers a resend sets anew (a fresh task's; its publish's trace context and time, with
``asyncbook_tracing``): not kept."""
_PROPERTIES = ("priority",)
"""The message properties a resend sends again (besides routing: its reply queue and
correlation id belong to the first send)."""


def kept_message(
    task: Task[Any, Any],
    headers: Mapping[str, Any],
    body: Any,
    exchange: Any,
    routing_key: Any,
    properties: Any,
    limit: int,
    redact: Collection[str] = frozenset(),
    keep_redacted: bool = False,
) -> str:
    """The message to keep (``KeptMessage``'s JSON), or, over ``limit`` bytes, its
    ``omission``; carrying a keyword argument named in ``redact`` (lower case), its
    ``redacted_omission`` unless ``keep_redacted``."""
    if not keep_redacted:
        masked = redacted_names(body, redact)
        if masked:
            return redacted_omission(masked)
    serializer = task.serializer or task.app.conf.task_serializer  # as apply_async's
    given = properties if isinstance(properties, dict) else {}
    kept_headers = {key: value for key, value in headers.items() if key not in _REPLACED}
    kept_properties = {key: given[key] for key in _PROPERTIES if given.get(key) is not None}
    exchange_name = exchange if isinstance(exchange, str) else getattr(exchange, "name", "") or ""
    routing = routing_key if isinstance(routing_key, str) else ""
    if serializer == "json":
        # Celery's default: the body kept as the JSON value it is sent as, the whole
        # record encoded once with kombu's JSON encoder (the publish's own).
        record = json_record(task.name, kept_headers, kept_properties, exchange_name, routing, body)
        kept = json_dumps(record)
    else:
        content_type, content_encoding, data = dumps(body, serializer=serializer)
        raw = data.encode(content_encoding) if isinstance(data, str) else bytes(data)
        kept = KeptMessage(
            task.name,
            raw,
            content_type,
            content_encoding,
            kept_headers,
            kept_properties,
            exchange_name,
            routing,
        ).to_json()
    if len(kept) > limit:
        return omission(len(kept), limit)
    return kept


def redacted_names(body: Any, redact: Collection[str]) -> list[str]:
    """The keyword arguments of a protocol 2 ``body`` (args, kwargs, embed) that ``redact``
    (lower-case names) masks, in their order."""
    kwargs = body[1] if isinstance(body, list | tuple) and len(body) >= 2 else None
    if not redact or not isinstance(kwargs, Mapping):
        return []
    return [key for key in kwargs if isinstance(key, str) and key.lower() in redact]
