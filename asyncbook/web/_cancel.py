"""``POST /api/tasks/<id>/cancel``: its body's limits and how its ``reason`` is read."""

from __future__ import annotations

from typing import Any

from ..errors import invalid

__all__ = ["CANCEL_BODY_LIMIT", "CANCEL_FIELDS", "MAX_REASON", "cancel_reason"]

CANCEL_BODY_LIMIT = 16_384
"""Largest cancel body, in bytes (any reason of ``MAX_REASON`` characters fits, escaped)."""
MAX_REASON = 1000
"""Longest cancel reason, in characters."""
CANCEL_FIELDS = frozenset({"reason"})
"""The fields a cancel body may have."""


def cancel_reason(value: Any) -> str | None:
    """The body's ``reason``: absent or null (None), or text of at most ``MAX_REASON``."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise invalid("reason must be a string (or absent)", field="reason")
    if len(value) > MAX_REASON:
        raise invalid(f"reason must be at most {MAX_REASON} characters", field="reason")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate, "\udcff" in JSON
        raise invalid("reason must be valid Unicode text", field="reason") from None
    return value
