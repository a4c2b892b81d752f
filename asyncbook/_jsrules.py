"""JavaScript semantics the reference relies on, spelled out for Python.

docs/spec.md's fine print: "blank" means what JavaScript's ``String.prototype.trim()``
strips, numbers are JSON numbers (an integral float is an integer), and task ids sort
by UTF-16 code units.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["is_blank", "is_finite_number", "is_integer", "is_number", "utf16_key"]

JS_WHITESPACE = frozenset(
    "\t\n\x0b\x0c\r \xa0\u1680"
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)


def is_blank(text: str) -> bool:
    """True when ``text.trim() === ""`` in JavaScript."""
    return all(char in JS_WHITESPACE for char in text)


def is_number(value: Any) -> bool:
    """True for a JSON number: an ``int`` or ``float``, never a ``bool``."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_finite_number(value: Any) -> bool:
    """``Number.isFinite``: a number that is neither NaN nor infinite."""
    return is_number(value) and math.isfinite(value)


def is_integer(value: Any) -> bool:
    """``Number.isInteger``: a finite number with no fractional part."""
    if not is_finite_number(value):
        return False
    return isinstance(value, int) or float(value).is_integer()


def normalize_number(value: int | float) -> int | float:
    """An integral float becomes the int it denotes (``40.0`` → 40, ``-0.0`` → 0)."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return value


def utf16_key(text: str) -> bytes:
    """Sort key matching JavaScript's ``<`` on strings (UTF-16 code units)."""
    return text.encode("utf-16-be", "surrogatepass")
