"""Argument checks that name the offending field (the reference's validators)."""

from __future__ import annotations

from typing import Any

from ._jsrules import is_blank, is_finite_number, is_integer, normalize_number
from ._models import STATE_NAMES
from .errors import invalid

__all__ = [
    "require_integer",
    "require_non_negative",
    "require_optional_string",
    "require_positive",
    "require_string",
    "require_text",
]


def require_integer(value: Any, field: str, minimum: int = 0) -> int:
    """Return ``value`` as an int, or raise naming ``field`` (the reference's ``integer``)."""
    if not is_integer(value) or value < minimum:
        raise invalid(f"{field} must be an integer >= {minimum}", field=field)
    return int(value)


def require_positive(value: Any, field: str) -> int | float:
    """Return ``value`` if it is a finite number > 0, or raise naming ``field``."""
    if not is_finite_number(value) or value <= 0:
        raise invalid(f"{field} must be a positive number", field=field)
    return normalize_number(value)


def require_non_negative(value: Any, field: str) -> int | float:
    """Return ``value`` if it is a finite number >= 0, or raise naming ``field``."""
    if not is_finite_number(value) or value < 0:
        raise invalid(f"{field} must be a non-negative number", field=field)
    return normalize_number(value)


def require_text(value: Any, field: str) -> str:
    """Return ``value`` if it is a string that is not blank, or raise naming ``field``."""
    if not isinstance(value, str):
        raise invalid(f"{field} must be a string", field=field)
    if is_blank(value):
        raise invalid(f"{field} must not be empty", field=field)
    return value


def require_string(value: Any, field: str) -> str:
    """Return ``value`` if it is a string (possibly blank), or raise naming ``field``."""
    if not isinstance(value, str):
        raise invalid(f"{field} must be a string", field=field)
    return value


def require_optional_string(value: Any, field: str) -> str | None:
    """None, or a string (a callback id may be any string, as in the reference)."""
    return None if value is None else require_string(value, field)


MAX_PAGE = 1000


def require_limit(value: Any, field: str = "limit", maximum: int = MAX_PAGE) -> int:
    """A page size from 1 to ``maximum``."""
    limit = require_integer(value, field, 1)
    if limit > maximum:
        raise invalid(f"{field} must be at most {maximum}", field=field)
    return limit


def require_state(value: Any, field: str = "state") -> str | None:
    """None, or one of the five state names."""
    if value is None:
        return None
    if not isinstance(value, str) or value not in STATE_NAMES:
        raise invalid(f"{field} must be one of {', '.join(STATE_NAMES)}", field=field)
    return value


def require_page_cursor(value: Any, field: str = "after") -> int | None:
    """None, or a listing cursor: the decimal text a previous page returned."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.isascii() or not value.isdigit() or len(value) > 18:
        raise invalid(f"{field} must be a cursor returned by a previous page", field=field)
    return int(value)


def require_heartbeat_timeout(value: Any) -> int | None:
    """None, or a whole number of milliseconds >= 1 (``heartbeatTimeoutMs``)."""
    if value is None:
        return None
    return require_integer(value, "heartbeatTimeoutMs", 1)
