"""The encoders' fast paths write exactly what the general ones write (issue 18: they
run once per event, so they skip ``json.dumps`` and the generic field walk)."""

from __future__ import annotations

import json
import math
from dataclasses import fields
from typing import Any

from asyncbook import FailEvent, StartEvent, SucceedEvent
from asyncbook.redis._args import number_text
from asyncbook.redis._script_args import ScriptArgs, _put
from asyncbook.redis._shard import Shard


def _reference_argv(record: ScriptArgs) -> list[Any]:
    """``ScriptArgs.argv`` without its fast path: ``_put`` on every field."""
    out: list[Any] = []
    for field in fields(record):
        _put(out, getattr(record, field.name))
    return out


def test_number_text_writes_what_json_writes() -> None:
    values: list[Any] = [0, 1, -1, 2**63, 10**30, 0.0, -0.0, 1.5, 1e300, 1e-300, 1 / 3]
    values += [1_700_000_000_000, 1_700_000_000_000.25, True, False]
    for value in values:
        expected = json.dumps(value) if not isinstance(value, bool) else ""
        assert number_text(value) == expected, value
    for refused in (math.nan, math.inf, -math.inf, "1", None):
        assert number_text(refused) == ""


def test_argv_of_the_apply_calls_is_the_field_walk() -> None:
    layout = Shard("enc", 10, None)
    events: list[Any] = [
        StartEvent(at_ms=1, worker="w@h\u00e9"),
        SucceedEvent(at_ms=2.5, result_ref="", result_hash="sha256:x"),
        FailEvent(at_ms=3, error="boom \u2603", retryable=True),
        {"type": "fail", "atMs": 4, "error": "e", "exception": "E", "traceback": "tb"},
        {"type": "progress", "atMs": 5, "progress": 50, "cursor": "c"},
        {"type": "start", "atMs": math.nan, "worker": "w"},
        None,
    ]
    for event in events:
        _keys, args, _error = layout.apply_call("t-\u00e9", event, "cb", full_task=False)
        assert args.argv() == _reference_argv(args), event
