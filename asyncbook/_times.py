"""Durations and moments as operators type them: ``90s``, ``10m``, ``2h``, ``1d``,
``500ms``; ms since the epoch; ISO 8601. Shared by the status server and the CLI."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from .errors import invalid

__all__ = ["parse_duration", "parse_moment"]

MAX_TEXT = 200
"""The longest duration or moment read (anything longer is refused, not parsed)."""

_UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"([0-9]{1,12})(ms|s|m|h|d)?")
_EPOCH_MS = re.compile(r"[0-9]{1,15}")


def parse_duration(text: str, field: str) -> int:
    """Milliseconds from ``90s``, ``10m``, ``2h``, ``1d``, ``500ms`` or a bare number of ms;
    anything else is ``invalid`` naming ``field``."""
    match = _DURATION.fullmatch(text.strip()) if len(text) <= MAX_TEXT else None
    if match is None:
        raise invalid(
            f"{field} must be a duration such as 10m, 2h or 1d (or a number of ms)", field=field
        )
    return int(match[1]) * _UNIT_MS[match[2] or "ms"]


def parse_moment(text: str, field: str, now_ms: int) -> int:
    """A moment in ms since the epoch, from ms since the epoch, a duration before
    ``now_ms`` (``10m``: ten minutes ago) or an ISO 8601 time (UTC unless it says
    otherwise); anything else is ``invalid`` naming ``field``."""
    text = text.strip()
    if len(text) > MAX_TEXT:
        raise invalid(f"{field} must be at most {MAX_TEXT} characters", field=field)
    if _EPOCH_MS.fullmatch(text):
        return int(text)
    if _DURATION.fullmatch(text):
        return max(0, now_ms - parse_duration(text, field))
    try:
        moment = datetime.fromisoformat(text)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        ms = int(moment.timestamp() * 1000)
    except (ValueError, OverflowError):
        raise invalid(
            f"{field} must be ms since the epoch, a duration ago (10m, 2h, 1d) or an ISO 8601 time",
            field=field,
        ) from None
    if ms < 0:
        raise invalid(f"{field} must not be before 1970", field=field)
    return ms
