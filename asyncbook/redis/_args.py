"""What ``RedisBook`` hands its scripts: JSON text, numbers and event slots, built in Python.

Event shapes are checked here; a value the script must refuse (a number that is not
finite) is passed as ``''`` so the script refuses it in the reference's order.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

from pydantic_core import PydanticSerializationError

from .._console import TEXT_LIMIT
from .._jsrules import is_blank, is_finite_number
from .._machine import cancel_reason
from .._models import AsyncEvent, CancelEvent, FailEvent, ProgressEvent, SucceedEvent
from ..errors import invalid
from ._script_args import EventArgs

__all__ = ["dumps", "event_args", "failure_json", "number_text", "utf8", "utf8_args"]


def dumps(value: str, field: str) -> str:
    """JSON text of a string, refusing text Redis cannot store (lone surrogates)."""
    return json.dumps(utf8(value, field), ensure_ascii=False)


def number_text(value: Any) -> str:
    """JSON text of a finite number; '' for anything the script must refuse."""
    kind = type(value)
    if kind is int:  # what json.dumps writes, without its encoder (this runs per event)
        return int.__repr__(value)
    if kind is float:
        return float.__repr__(value) if math.isfinite(value) else ""
    return json.dumps(value) if is_finite_number(value) else ""


def utf8(value: str, field: str) -> str:
    """``value`` if it encodes as UTF-8 (no lone surrogates), else an error naming ``field``."""
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise invalid(f"{field} must be valid Unicode text", field=field) from None
    return value


def utf8_args(values: Iterable[Any]) -> list[Any]:
    """``values`` with each text as its UTF-8 bytes (checked at the edge, ``_args.utf8``):
    redis-py's own encoding of a str costs several times the encoding itself."""
    return [value.encode() if type(value) is str else value for value in values]


def event_args(event: AsyncEvent) -> EventArgs:
    """The event slots of apply.lua for a well-shaped event."""
    at = number_text(event.at_ms)
    progress = digest = error = ""
    retryable = ref_blank = digest_blank = False
    if isinstance(event, ProgressEvent):
        progress = number_text(event.progress)
    elif isinstance(event, SucceedEvent):
        digest = utf8(event.result_hash, "event.resultHash")
        ref_blank = is_blank(event.result_ref)
        digest_blank = is_blank(event.result_hash)
    elif isinstance(event, FailEvent):
        retryable = event.retryable
        error = dumps(event.error, "event.error")
    elif isinstance(event, CancelEvent):
        error = dumps(cancel_reason(event), "event.reason")
    # The event is recorded only when its numbers are finite (the script checks first).
    event_json = ""
    if at and (progress or not isinstance(event, ProgressEvent)):
        try:
            event_json = event.model_dump_json(by_alias=True)
        except PydanticSerializationError:
            raise invalid("event text must be valid Unicode", field="event") from None
    # In EventArgs' order: its fields are apply.lua's slots.
    slots = (at, event_json, progress, retryable, digest, ref_blank, digest_blank, error)
    return EventArgs(event.type, *slots)


def failure_json(exception: Any, traceback: Any) -> str:
    """apply.lua's ARGV[18]: a failure's exception type and traceback, '' for neither."""
    given = {
        key: value[:TEXT_LIMIT]
        for key, value in (("exception", exception), ("traceback", traceback))
        if isinstance(value, str) and value
    }
    return json.dumps(given, ensure_ascii=False) if given else ""
