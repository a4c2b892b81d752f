"""Server-sent events: the wire format, and the ``Last-Event-ID`` cursor."""

from __future__ import annotations

import json
from typing import Any

from ..errors import invalid

__all__ = ["MAX_CURSOR", "format_comment", "format_event", "parse_count", "parse_cursor"]

MAX_CURSOR = 2**53
"""Largest version a cursor may name (JSON's exact integers)."""


def format_event(event: str, data: dict[str, Any], id: int | None = None) -> bytes:
    """One event: ``event:``, optional ``id:`` (a version) and one ``data:`` line of JSON."""
    lines = [f"event: {event}"]
    if id is not None:
        lines.append(f"id: {id}")
    lines.append("data: " + json.dumps(data, ensure_ascii=False, separators=(",", ":")))
    return ("\n".join(lines) + "\n\n").encode("utf-8")


def format_comment(text: str) -> bytes:
    """A comment line (keeps idle connections open through proxies)."""
    return f": {text}\n\n".encode()


def parse_count(value: str, field: str) -> int:
    """A decimal integer >= 0 from a query parameter or header, at most ``MAX_CURSOR``."""
    text = value.strip(" \t")
    if not text or not text.isascii() or not text.isdigit() or len(text) > 16:
        raise invalid(f"{field} must be an integer >= 0", field=field)
    number = int(text)
    if number > MAX_CURSOR:
        raise invalid(f"{field} must be at most {MAX_CURSOR}", field=field)
    return number


def parse_cursor(value: str | None, field: str) -> int:
    """A version cursor (``?cursor=`` or ``Last-Event-ID``); absent is 0."""
    return 0 if value is None else parse_count(value, field)
